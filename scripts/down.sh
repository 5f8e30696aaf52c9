#!/usr/bin/env bash
# Stop what scripts/up.sh started; the agent finishes its current measurement first.
set -uo pipefail
cd "$(dirname "$0")/.."
for name in api beat worker agent; do
  pidfile=.run/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "$name stopped"
  fi
  rm -f "$pidfile"
done
