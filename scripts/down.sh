#!/usr/bin/env bash
# Stop what scripts/up.sh started: SIGTERM to each supervisor, which passes it on and waits (the agent finishes
# its current measurement first); after 30 s, or for anything left in its session, SIGKILL. Then the embedded
# PostgreSQL and Redis, if up.sh started them (their data stays in .run/pg and .run/redis).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RUN=${TRAINCAST_RUN_DIR:-.run}
VENV=${VENV:-.venv}
for name in api beat worker agent; do
  pidfile=$RUN/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    # The supervisor leads its own process group (up.sh starts it with setsid): end the whole group, so neither
    # a process that ignored SIGTERM nor a killed worker's pool processes outlive it.
    kill -0 -- "-$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
    echo "$name stopped"
  fi
  rm -f "$pidfile" "$RUN/$name.child.pid"
done
if [ -x "$VENV/bin/python" ]; then
  "$VENV/bin/python" -m shared.core.embedded down "$RUN"
fi
