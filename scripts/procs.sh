# shellcheck shell=bash
# Sourced by up.sh and down.sh: the state of what a supervisor (scripts/supervise.sh, started with setsid, so the
# leader of its own process group) left behind.

alive() {  # pid: running, not a zombie (a killed supervisor nobody reaped still answers kill -0)
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

group_alive() {  # pgid: some live process of the group is left
  local pid
  for pid in $(ps -eo pid=,pgid= | awk -v g="$1" '$2 == g {print $1}'); do
    alive "$pid" && return 0
  done
  return 1
}

stop_group() {  # pgid: SIGTERM to its supervisor if it lives (it passes it on and waits), else to the whole group;
  # after 30 s, SIGKILL to whatever of the group is left
  local group=$1
  if alive "$group"; then kill -TERM "$group" 2>/dev/null; else kill -TERM -- "-$group" 2>/dev/null; fi
  for _ in $(seq 1 60); do group_alive "$group" || break; sleep 0.5; done
  kill -KILL -- "-$group" 2>/dev/null || true
}
