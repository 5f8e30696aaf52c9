#!/usr/bin/env bash
# The test command: lint, type-check, then pytest against real PostgreSQL and Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
scripts/browser.sh  # Debian's Chromium for tests/test_web.py; skipped when already installed
VENV=${VENV:-.venv}
scripts/lint.sh
"$VENV/bin/python" -m tests.preflight
exec "$VENV/bin/pytest" "$@"
