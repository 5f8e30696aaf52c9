#!/usr/bin/env bash
# From a fresh clone: install, migrate, start the stack, calibrate local once (at the GPU spread on a CUDA host, whose
# agent describes `local` as its GPU; at the CPU spread elsewhere), predict resnet18 on local and on three cloud GPUs
# (reference answers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/up.sh  # also keeps the local admin API key in .run/admin.key, which traincast below reads
VENV=${VENV:-.venv}
# The embedded PostgreSQL's and Redis's URLs, if up.sh started them (calibrate below reads the database directly).
# shellcheck source=/dev/null
. "${TRAINCAST_RUN_DIR:-.run}/services.env"
export TRAINCAST_API_URL=${TRAINCAST_API_URL:-http://127.0.0.1:${API_PORT:-8000}}
# The local agent describes `local` when it registers: its GPU on a CUDA host (data/gpus.csv's figures), else a CPU.
# Wait for it, so that calibration (GPU or CPU spread) and the predictions below are for what this host is.
local_gpu=$("$VENV/bin/python" - "${TRAINCAST_RUN_DIR:-.run}" <<'PY'
import sys, time
from shared import agents, machine_types
from shared.core.settings import get_settings
deadline, alive_after_s = time.monotonic() + 180, get_settings().agent_alive_after_s
while not any(a["alive"] for a in agents.list_all(alive_after_s=alive_after_s, machine_type="local")):
    if time.monotonic() > deadline:
        sys.exit(f"error: no local agent registered within 180 s; see {sys.argv[1]}/agent.log")
    time.sleep(1)
local = machine_types.get_by_name(name="local")
print(f"local: {local['source']}", file=sys.stderr)
print(local["gpu"] or "")
PY
)
if [ -n "$local_gpu" ]; then
  spread="whole training steps at 160-224 px, batch 8-128: the GPU spread for $local_gpu"
  # Sizes the calibration measured at 224 px; --wait-for-benchmarks: a GPU type otherwise gets a reference answer
  # while layers it lacks are still being measured, and this is to show local's own benchmarked answer.
  predict=(--batch-sizes "8,32,128" --wait-for-benchmarks)
else
  spread="whole training steps at 64-160 px: the CPU spread"
  predict=(--batch-sizes "8,16,32")
fi
# A model of an older kind (quantile-model intervals, one image size) or feature list is calibrated again too.
if ! "$VENV/bin/python" -c "import sys; from prediction import features; from worker import predictor; m = predictor.latest(machine_type='local'); sys.exit(m is None or m['kind'] != predictor.KIND or m['params'].get('features') != list(features.NAMES))"; then
  # A first model from three quick CNNs answers in a couple of minutes; the default set's other CNNs are measured
  # in the background and refit the model when they are done (its rows are shared, nothing is measured twice).
  echo "no current model for local yet: a first one from 3 CNNs of the default 7 ($spread)…"
  "$VENV/bin/traincast" calibrate --machine local --cnns resnet18,mobilenet_v2,squeezenet1_1
  refine=1
fi
"$VENV/bin/traincast" predict resnet18 --machine local "${predict[@]}"
# The same job again is served from the stored layer benchmarks: no measurement runs.
"$VENV/bin/python" - "${predict[@]}" <<'PY'
import subprocess, sys, time
started = time.perf_counter()
subprocess.run([sys.prefix + "/bin/traincast", "predict", "resnet18", "--machine", "local", *sys.argv[1:],
                "--quiet"], check=True, stdout=subprocess.DEVNULL)
print(f"the same job again, from stored benchmarks: {time.perf_counter() - started:.2f} s")
PY
# GPUs nobody has measured here: answered at once from public measurements, each row labelled.
"$VENV/bin/traincast" predict resnet18 --machine g4dn.xlarge,g2-standard-8,Standard_NC24ads_A100_v4 --batch-sizes 32,64,128 --quiet
if [ -n "${refine:-}" ]; then
  # After the predictions above, so that their own measurements do not queue behind it on the one local agent. After
  # the warm-up too (worker/warmup.py), run here beside the worker's own steps: it waits while an agent on this host
  # measures, so with the calibration first a large job on the GPU types would be answered cold for its minutes too.
  log="${TRAINCAST_RUN_DIR:-.run}/calibrate.log"
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
  setsid bash -c '"$1" -m worker.warmup --if-enabled; exec "$2" calibrate --machine local' refine \
      "$VENV/bin/python" "$VENV/bin/traincast" </dev/null >"$log" 2>&1 &
  echo $! >"${TRAINCAST_RUN_DIR:-.run}/calibrate.pid"  # its own process group: make down ends it too
  echo "in the background (log $log): the GPU types' reference convs for the built-in CNNs (a few minutes), then the"
  echo "other 4 CNNs calibrated on local, whose model is refit with all 7 when done"
fi
echo "the stack is still running (make down stops it); the web page: $TRAINCAST_API_URL/ , API docs: $TRAINCAST_API_URL/docs"
echo "API key (admin; the page asks for one, curl sends it as -H \"Authorization: Bearer \$(cat .run/admin.key)\"): .run/admin.key"
