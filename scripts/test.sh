#!/usr/bin/env bash
# The test command: lint, then the whole suite against real broker processes and clients.
#
# Most of the suite waits (broker and ZooKeeper sessions, Spark, clients' timeouts), so it runs on
# GREGOR_TEST_WORKERS pytest-xdist workers (default 3), a test module per worker at a time (its
# module-scoped broker starts once; tests/conftest.py groups the modules and orders the slow ones
# first). The tests marked `serial` measure rates or latencies that other work on the same cores
# would distort: they run afterwards, alone. Arguments go to both runs (`scripts/test.sh tests/clients
# -k kcat`); a run that selects no test is not a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check gregor tests benchmarks
# Every broker, tool and worker the tests start is a new interpreter: with cached bytecode it imports
# gregor in half the time (0.25 s instead of 0.5 s of CPU each, hundreds of times per run).
unset PYTHONDONTWRITEBYTECODE

run() {
    local code=0
    .venv/bin/python -m pytest -q -p no:cacheprovider "$@" || code=$?
    [ "$code" -eq 5 ] && code=0  # no test selected
    return "$code"
}

status=0
run -n "${GREGOR_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder -m "not serial" "$@" || status=$?
run -m serial "$@" || status=$?
exit "$status"
