#!/usr/bin/env bash
# Keep one process of scripts/up.sh running: start it again whenever it exits on its own (a crash, kill -9, a
# worker that gave up on Redis), after 1 s, doubling up to 60 s, back to 1 s once it ran a minute. Each restart is
# a line in RUN/NAME.log beside the process's own output. SIGTERM or SIGINT (scripts/down.sh) is passed on to the
# process, which is waited for (the agent finishes its measurement), and then this exits too.
# Usage: supervise.sh RUN NAME command…   (writes the process's pid to RUN/NAME.child.pid)
set -uo pipefail
run=$1 name=$2
shift 2
log=$run/$name.log
child='' stopping=''
say() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) supervise: $name $*" >>"$log"; }
stop() {
  stopping=1
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi
}
trap stop TERM INT

delay=1
while :; do
  started=$SECONDS
  "$@" >>"$log" 2>&1 </dev/null &
  child=$!
  echo "$child" >"$run/$name.child.pid"
  say "started (pid $child)"
  # A trapped signal interrupts `wait` while the process still runs: wait again until it has exited.
  while :; do
    wait "$child"
    code=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=''
  if [ -n "$stopping" ]; then
    say "stopped (exit code $code)"
    rm -f "$run/$name.child.pid"
    exit 0
  fi
  ran=$((SECONDS - started))
  if [ "$ran" -ge 60 ]; then delay=1; fi
  say "exited with code $code after ${ran} s; restarting in ${delay} s"
  sleep "$delay" &
  sleeper=$!
  wait "$sleeper"
  kill "$sleeper" 2>/dev/null
  if [ -n "$stopping" ]; then
    say "stopped"
    rm -f "$run/$name.child.pid"
    exit 0
  fi
  delay=$((delay * 2 > 60 ? 60 : delay * 2))
done
