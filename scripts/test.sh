#!/usr/bin/env bash
# The test command: lint and type-check beside the unit tests (tests/unit) with DATABASE_URL and REDIS_URL pointing
# nowhere (they need no service), then the integration tests (tests/integration) against real PostgreSQL and Redis:
# the machine's where they answer (or TEST_DATABASE_URL / TEST_REDIS_URL), else the embedded ones from the pip
# wheels, started by tests/support/preflight.py with their data in .run/ (make down stops them).
# Arguments go to both pytest runs (e.g. -x, -k name); --durations shows where each run's time goes.
# The unit tests run in TEST_WORKERS pytest-xdist workers (default 2; 0 runs them in pytest's own process), the
# integration tests in TEST_INTEGRATION_WORKERS (default 2), a test file to a worker (--dist loadfile): a file's
# module-scoped stack starts once, and each worker has a database and Redis db of its own (integration/conftest.py).
# One worker left the cores idle much of the time, waiting on processes to start and answer (docs/PERFORMANCE.md,
# make test on a fresh clone: 12:42-13:50 in all against 18:45).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/venv.sh
scripts/browser.sh  # Debian's Chromium for tests/integration/test_web.py; skipped when already installed
VENV=${VENV:-.venv}
# The project's own modules compiled once (a second): where PYTHONDONTWRITEBYTECODE is set, as on our CI hosts, every
# worker, agent and API process the tests start would compile them again (the venv's packages: scripts/venv.sh).
"$VENV/bin/python" -m compileall -q -j 2 api bench calibration cli fleet gpu_agent prediction shared tests worker \
    >/dev/null
# Lint (~45 s, one core, mostly mypy) runs beside the unit tests; its output is shown, and its failure counted, after.
# At the lowest priority: it takes the cores' idle moments, and a unit test that times real sleeps never waits for it.
lint_log=$(mktemp)
trap 'rm -f "$lint_log"' EXIT
nice -n 19 scripts/lint.sh >"$lint_log" 2>&1 &
lint=$!
# Port 1 and Redis db 0 of port 1: nothing listens there, so a unit test that reaches a service fails at once.
unit=0
DATABASE_URL=postgresql://127.0.0.1:1/nowhere REDIS_URL=redis://127.0.0.1:1/0 \
    "$VENV/bin/pytest" -n "${TEST_WORKERS:-2}" --durations=25 tests/unit "$@" || unit=$?
linted=0
wait "$lint" || linted=$?
cat "$lint_log"
rm -f "$lint_log"
[ "$linted" = 0 ] || { echo "lint failed (above)" >&2; exit "$linted"; }
[ "$unit" = 0 ] || exit "$unit"
"$VENV/bin/python" -m tests.support.preflight
exec "$VENV/bin/pytest" -n "${TEST_INTEGRATION_WORKERS:-2}" --dist loadfile --durations=25 tests/integration "$@"
