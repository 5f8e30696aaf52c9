#!/usr/bin/env bash
# The test command: lint, type-check, then pytest against real PostgreSQL and Redis: the machine's where they answer
# (or TEST_DATABASE_URL / TEST_REDIS_URL), else the embedded ones from the pip wheels, started by tests/preflight.py
# with their data in .run/ (make down stops them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
scripts/browser.sh  # Debian's Chromium for tests/test_web.py; skipped when already installed
VENV=${VENV:-.venv}
scripts/lint.sh
"$VENV/bin/python" -m tests.preflight
exec "$VENV/bin/pytest" "$@"
