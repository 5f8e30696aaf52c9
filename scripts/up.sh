#!/usr/bin/env bash
# Start the stack in the background: API on :8000, worker, beat (the reconciler's schedule), local agent.
# Each runs under scripts/supervise.sh, which starts it again when it exits on its own; scripts/down.sh stops all.
# TRAINCAST_RUN_DIR (default .run) holds the pid files, logs, the local admin key and the embedded servers' data.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
VENV=${VENV:-.venv}
RUN=${TRAINCAST_RUN_DIR:-.run}
mkdir -p "$RUN"
# Where no PostgreSQL or Redis answers at DATABASE_URL / REDIS_URL (or TRAINCAST_EMBEDDED=1), start the project's own
# from the pip wheels, data in $RUN/pg and $RUN/redis (shared/core/embedded.py); their URLs go into $RUN/services.env,
# which run.sh and other shells source.
"$VENV/bin/python" -m shared.core.embedded up "$RUN" >"$RUN/services.env"
# shellcheck source=/dev/null
. "$RUN/services.env"
"$VENV/bin/python" -m shared.core.prestart 10

# API keys: a local admin key, made once and kept in .run/admin.key (mode 0600); the CLI reads it from there.
"$VENV/bin/python" -m cli.keys "$RUN/admin.key"

# shellcheck source=scripts/procs.sh
. scripts/procs.sh

start() {  # name, command…
  local name=$1; shift
  if [ -f "$RUN/$name.pid" ] && alive "$(cat "$RUN/$name.pid")"; then
    echo "$name already running (pid $(cat "$RUN/$name.pid"))"; return
  fi
  # Its supervisor is gone but what it ran may not be (a killed supervisor leaves its process running,
  # unsupervised): never a second copy beside it. The group is the old supervisor's (setsid made it the leader).
  if [ -f "$RUN/$name.pid" ]; then
    local group
    group=$(cat "$RUN/$name.pid")
    if group_alive "$group"; then
      echo "$name: stopping what its lost supervisor left running (process group $group)"
      stop_group "$group"
    fi
    rm -f "$RUN/$name.pid" "$RUN/$name.child.pid"
  fi
  # A session of its own per supervisor: down.sh can then end whatever is left of it (a killed worker's pool).
  setsid scripts/supervise.sh "$RUN" "$name" "$@" </dev/null >/dev/null 2>&1 &
  echo $! >"$RUN/$name.pid"
  echo "$name started (supervisor pid $!, log $RUN/$name.log)"
}

start api "$VENV/bin/uvicorn" api.main:app --http api.server:Protocol --no-proxy-headers --host 127.0.0.1 --port "${API_PORT:-8000}"
# Beat runs alone, so the reconciler is scheduled once however many workers run. The worker's flags skip Celery's
# start-up handshake (shared/core/tasks.py WORKER_FLAGS says why).
start worker "$VENV/bin/celery" -A worker.app worker -Q jobs --without-mingle --without-gossip --concurrency 2 --loglevel INFO
start beat "$VENV/bin/celery" -A worker.app beat --loglevel INFO --schedule "$RUN/celerybeat-schedule"
start agent "$VENV/bin/python" -m gpu_agent

for _ in $(seq 1 60); do
  if "$VENV/bin/python" -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:${API_PORT:-8000}/readyz').status_code != 200)" 2>/dev/null; then
    echo "API ready at http://127.0.0.1:${API_PORT:-8000}"; exit 0
  fi
  sleep 1
done
echo "error: the API did not become ready; see $RUN/api.log" >&2
exit 1
