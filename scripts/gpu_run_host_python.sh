#!/usr/bin/env bash
# scripts/gpu_run.sh on a GPU host whose python3 has CUDA torch but is not the project's 3.11, with no package index
# (docs/GPU.md, "On a host without an index"): the project is copied to a work folder outside this tree, the wheels of
# WHEELS (scripts/wheelhouse.sh --python-version 3.X --no-torch) are installed for the host's python3 into a folder of
# their own, .venv/bin wrappers run that python3 with them, and gpu_run.sh runs there. Where py-spy is among the
# wheels, the agent is sampled all along (OUT/agent_profile.txt: where a measurement's time goes besides the GPU).
#
# Usage: scripts/gpu_run_host_python.sh WHEELS OUT [bench/gpu_run.py options]
#   TRAINCAST_HOST_PYTHON  the host's Python (default python3)
#   TRAINCAST_WORK_DIR     where the copy, its wheels and the stack's state go (default /tmp/traincast-host)
#   TRAINCAST_TIMEOUT_S    gpu_run.sh is stopped after this long (default 560: a lent machine's command may run 600)
set -uo pipefail
wheels=${1:?usage: scripts/gpu_run_host_python.sh WHEELS OUT [options]}
out=${2:?usage: scripts/gpu_run_host_python.sh WHEELS OUT [options]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
wheels=$(cd "$wheels" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
py=${TRAINCAST_HOST_PYTHON:-python3}
work=${TRAINCAST_WORK_DIR:-/tmp/traincast-host}
site=$work/site
run=${TRAINCAST_RUN_DIR:-$work/run}
started=$(date +%s)
# A stack a previous run left (a command cut short) would answer in place of this one's.
for f in "$run"/*.pid; do [ -f "$f" ] && kill -9 -- "-$(cat "$f")" 2>/dev/null; done
rm -rf "$work/proj" "$site" "$run" && mkdir -p "$work/proj" "$site"
tar -C "$root" --exclude=./.git --exclude=./.venv --exclude=./.run --exclude=./.gpu -cf - . | tar -C "$work/proj" -xf -
if compgen -G "$wheels/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
fi
cd "$work/proj" && mkdir -p .venv/bin
wrap() {  # name, python arguments
  printf '#!/bin/sh\nexport PYTHONPATH=%s:%s\nexec %s %s "$@"\n' "$site" "$work/proj" "$py" "$2" >".venv/bin/$1"
  chmod +x ".venv/bin/$1"
}
wrap python ""; wrap celery "-m celery"; wrap uvicorn "-m uvicorn"; wrap traincast "-m cli.main"
# scripts/venv.sh's stamp: the wrappers are the install.
touch ".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
export PYTHONPATH=$site:$work/proj TRAINCAST_RUN_DIR=$run
{
  echo "host: $("$py" -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__,
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")'), $(nproc) cores;" \
    "set up in $(($(date +%s) - started)) s"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null
} 2>&1 | tee -a "$out/run.log"
spy=""
if [ -x "$site/bin/py-spy" ]; then
  (for _ in $(seq 120); do
    if [ -s "$run/agent.child.pid" ]; then
      exec "$site/bin/py-spy" record --nonblocking --rate 25 --duration "${TRAINCAST_TIMEOUT_S:-560}" --format raw \
        -o "$out/agent_profile.txt" --pid "$(cat "$run/agent.child.pid")" >"$work/py-spy.log" 2>&1
    fi
    sleep 1
  done) &
  spy=$!
fi
timeout -k 20 "${TRAINCAST_TIMEOUT_S:-560}" scripts/gpu_run.sh "$out" "$@"
rc=$?
if [ -n "$spy" ]; then  # py-spy writes its profile when the agent it follows ends, or on SIGINT
  kill -INT "$spy" 2>/dev/null
  for _ in $(seq 15); do kill -0 "$spy" 2>/dev/null || break; sleep 1; done
fi
echo "gpu_run.sh ended with $rc after $(($(date +%s) - started)) s" | tee -a "$out/run.log"
exit "$rc"
