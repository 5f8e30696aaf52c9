#!/usr/bin/env bash
# A stand-in for a host's Python and for a venv's python and pip (tests/unit/test_install_scripts.py), so that
# scripts/venv.sh runs for real without installing anything. As pip it logs its arguments (tab-separated, one call a
# line) in the venv's pip.calls; as python it makes a venv of stand-ins (recording how in made-by), answers venv.sh's
# checks, and runs scripts/requirements.py with the real python3.
# FAKE_NO_TORCH=1: torch does not import. FAKE_PYTHON_VERSION: the version it claims (default 3.11).
# FAKE_UV=1: pip installing uv puts a stand-in uv (logging in uv.calls) into the venv; FAKE_UV=fail: that uv fails.
# FAKE_PIP_CONFIG: what `pip config list` prints.
set -euo pipefail
venv=$(cd "$(dirname "$0")/.." && pwd)
case "$(basename "$0")" in
  pip)
    (IFS=$'\t'; echo "$*") >>"$venv/pip.calls"
    if [ "${1:-}" = config ]; then
      printf '%s' "${FAKE_PIP_CONFIG:-}"
    elif [ -n "${FAKE_UV:-}" ] && [[ " $* " == *" uv=="* ]]; then
      ln -sf "$(readlink -f "$0")" "$venv/bin/uv"
    fi
    exit 0
    ;;
  uv)
    (IFS=$'\t'; echo "$*") >>"$venv/uv.calls"
    [ "${FAKE_UV:-}" != fail ]
    exit
    ;;
esac
version=${FAKE_PYTHON_VERSION:-3.11}
case "${1:-}" in
  -m)
    [ "${2:-}" = venv ] || { echo "fake python: only -m venv" >&2; exit 2; }
    target=${*: -1}
    mkdir -p "$target/bin"
    ln -sf "$(readlink -f "$0")" "$target/bin/python"
    ln -sf "$(readlink -f "$0")" "$target/bin/pip"
    system=false
    [[ " $* " == *" --system-site-packages "* ]] && system=true
    echo "include-system-site-packages = $system" >"$target/pyvenv.cfg"
    echo "$@" >"$target/made-by"
    ;;
  -V) echo "Python $version.0" ;;
  -c)
    case "$2" in
      *version_info*) [ "$version" = 3.11 ] ;;
      *"print(torch"*) [ -z "${FAKE_NO_TORCH:-}" ] && echo "2.11.0 0.26.0 12.8" ;;
      *) ;;  # venv.sh's last check: everything imports once installed
    esac
    ;;
  *) exec python3 "$@" ;;
esac
