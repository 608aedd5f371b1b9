#!/usr/bin/env bash
# The test command: lint, then the whole suite against real broker processes and clients.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check gregor tests benchmarks
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
