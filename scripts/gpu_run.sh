#!/usr/bin/env bash
# The measured path on a GPU host in one call (docs/GPU.md): install, start a private stack, run bench/gpu_run.py
# (calibrate `local` at the GPU spread, score CNNs it never saw, export the bundle), stop the stack. Everything goes
# to OUT: summary.json (each stage's figures and wall time, written as each ends), bundle.jsonl.gz, run.log.
#   scripts/gpu_run.sh OUT                       the host's CUDA torch (TRAINCAST_SYSTEM_TORCH=1) or the pinned one
#   TRAINCAST_WHEELHOUSE=DIR scripts/gpu_run.sh OUT   install offline from scripts/wheelhouse.sh's folder
#   TRAINCAST_DRY_RUN=1 scripts/gpu_run.sh OUT   on a CPU: a small spread and a few small CNNs (what the tests run)
#   scripts/gpu_run.sh OUT --budget-s 470        options after OUT go to bench/gpu_run.py (--help lists them)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_run.sh OUT [bench/gpu_run.py options]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A private stack: its own servers, ports and run folder, outside the copied tree, so nothing stale answers.
export TRAINCAST_EMBEDDED=1
export TRAINCAST_RUN_DIR=${TRAINCAST_RUN_DIR:-/tmp/traincast-gpu-run}
export API_PORT=${API_PORT:-8765}
export TRAINCAST_API_URL="http://127.0.0.1:$API_PORT"
started=$(date +%s)
scripts/venv.sh 2>&1 | tee -a "$out/run.log"
installed=$(date +%s)
# The services' logs come back with the figures (their last MiB each: a lent machine returns files of bounded size).
finish() {
  scripts/down.sh >>"$out/run.log" 2>&1 || true
  for name in agent worker api; do
    [ -f "$TRAINCAST_RUN_DIR/$name.log" ] && tail -c 1048576 "$TRAINCAST_RUN_DIR/$name.log" >"$out/$name.log"
  done
  return 0
}
trap finish EXIT
trap 'exit 143' TERM INT  # a timeout's signal still stops the stack and saves the logs
scripts/up.sh 2>&1 | tee -a "$out/run.log"
TRAINCAST_API_KEY=$(cat "$TRAINCAST_RUN_DIR/admin.key")
export TRAINCAST_API_KEY
up=$(date +%s)
echo "{\"install_s\": $((installed - started)), \"stack_up_s\": $((up - installed))}" >"$out/setup.json"
args=(--out "$out" "$@")
case "${TRAINCAST_DRY_RUN:-}" in 1 | true | yes) args+=(--dry-run) ;; esac
.venv/bin/python bench/gpu_run.py "${args[@]}" 2>&1 | tee -a "$out/run.log"
echo "wall time: $(($(date +%s) - started)) s; figures in $out/summary.json" | tee -a "$out/run.log"
