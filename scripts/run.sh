#!/usr/bin/env bash
# From a fresh clone: install, migrate, start the stack, calibrate local once, predict resnet18 on local and on
# three cloud GPUs (reference answers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/up.sh  # also keeps the local admin API key in .run/admin.key, which traincast below reads
VENV=${VENV:-.venv}
# The embedded PostgreSQL's and Redis's URLs, if up.sh started them (calibrate below reads the database directly).
# shellcheck source=/dev/null
. "${TRAINCAST_RUN_DIR:-.run}/services.env"
export TRAINCAST_API_URL=${TRAINCAST_API_URL:-http://127.0.0.1:${API_PORT:-8000}}
# A model of an older kind (quantile-model intervals, one image size) is calibrated again too.
if ! "$VENV/bin/python" -c "import sys; from worker import predictor; m = predictor.latest(machine='local'); sys.exit(m is None or m['kind'] != predictor.KIND)"; then
  echo "no current model for local yet: calibrating (whole training steps of 7 CNNs at 64-160 px, about 5 minutes on a CPU)…"
  "$VENV/bin/traincast" calibrate --machine local
fi
"$VENV/bin/traincast" predict resnet18 --machine local --batch-sizes 8,16,32
# The same job again is served from the stored layer benchmarks: no measurement runs.
"$VENV/bin/python" - <<'PY'
import subprocess, sys, time
started = time.perf_counter()
subprocess.run([sys.prefix + "/bin/traincast", "predict", "resnet18", "--machine", "local",
                "--batch-sizes", "8,16,32", "--quiet"], check=True, stdout=subprocess.DEVNULL)
print(f"the same job again, from stored benchmarks: {time.perf_counter() - started:.2f} s")
PY
# GPUs nobody has measured here: answered at once from public measurements, each row labelled.
"$VENV/bin/traincast" predict resnet18 --machine g4dn.xlarge,g2-standard-8,Standard_NC24ads_A100_v4 --batch-sizes 32,64,128 --quiet
echo "the stack is still running (make down stops it); the web page: $TRAINCAST_API_URL/ , API docs: $TRAINCAST_API_URL/docs"
echo "API key (admin; the page asks for one, curl sends it as -H \"Authorization: Bearer \$(cat .run/admin.key)\"): .run/admin.key"
