#!/usr/bin/env bash
# The test command: lint, then the tests against real broker processes and clients.
#
#   scripts/test.sh                  everything: the unit tests, then the integration tests
#   scripts/test.sh unit             the unit tests alone (tests/unit: no sockets, no processes; seconds)
#   scripts/test.sh integration      the integration tests alone (real brokers, clients, ZooKeeper, Spark)
#   scripts/test.sh [unit|integration] PYTEST-ARGS   e.g. `scripts/test.sh tests/clients -k kcat`
#
# tests/conftest.py marks each test `unit` or `integration` by its folder (so `pytest -m unit` works too),
# and fails a unit test that connects, binds or starts a process (tests/unit_guard.py).
#
# Most integration tests wait (broker and ZooKeeper sessions, Spark, clients' timeouts), so they run on
# GREGOR_TEST_WORKERS pytest-xdist workers (default 3), a test module per worker at a time (its
# module-scoped broker starts once; tests/conftest.py groups the modules and orders the slow ones
# first). The tests marked `serial` measure rates or latencies that other work on the same cores
# would distort: they run afterwards, alone. Arguments go to every run; a run that selects no test is
# not a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=all
case "${1-}" in
  unit|integration) kind=$1; shift ;;
esac
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

# Without paths in the arguments, the unit run collects tests/unit alone (not the whole tree to deselect).
paths=()
for a in "$@"; do [[ "$a" == tests* ]] && paths+=("$a"); done
status=0
if [ "$kind" != integration ]; then
  if [ ${#paths[@]} -eq 0 ]; then run -m unit "$@" tests/unit || status=$?; else run -m unit "$@" || status=$?; fi
fi
if [ "$kind" != unit ]; then
  run -n "${GREGOR_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder -m "integration and not serial" "$@" \
    || status=$?
  run -m "integration and serial" "$@" || status=$?
fi
exit "$status"
