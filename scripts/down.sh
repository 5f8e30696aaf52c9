#!/usr/bin/env bash
# Stop what scripts/up.sh started: SIGTERM to each supervisor, which passes it on and waits (the agent finishes
# its current measurement first); after 30 s, or for anything left in its session, SIGKILL. Then the embedded
# PostgreSQL and Redis, if up.sh started them (their data stays in .run/pg and .run/redis).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RUN=${TRAINCAST_RUN_DIR:-.run}
VENV=${VENV:-.venv}
# shellcheck source=scripts/procs.sh
. scripts/procs.sh
for name in calibrate api beat worker agent; do
  pidfile=$RUN/$name.pid
  [ -f "$pidfile" ] || continue
  # The supervisor leads its own process group (up.sh starts it with setsid): the whole group ends, so neither a
  # process that ignored SIGTERM, a killed worker's pool processes, nor what a lost supervisor left outlive it.
  group=$(cat "$pidfile")
  if group_alive "$group"; then
    stop_group "$group"
    echo "$name stopped"
  fi
  rm -f "$pidfile" "$RUN/$name.child.pid"
done
if [ -x "$VENV/bin/python" ]; then
  "$VENV/bin/python" -m shared.core.embedded down "$RUN"
fi
