#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (tiny model, real Redis and HTTP on loopback).
#
# pytest runs in two passes: first the tests that may share the machine, on TURBOTTS_TEST_WORKERS
# pytest-xdist workers (default 2; worksteal: each takes half in order, so module fixtures are
# built once, and the first done takes over the other's rest); then the `serial` ones
# (throughput, capacity and stall measurements, the browser, Ray), alone. The run closes on one
# pytest line that sums both passes and exits non-zero if either failed (tests/passes.py); the
# markers are put on in tests/markers.py.
#
#   scripts/test.sh [PYTEST ARGS]          everything, as CI runs it (.ci/run)
#   scripts/test.sh --quick [PYTEST ARGS]  the inner loop: no browser, Ray, subprocess or kernel build
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
if [ "${1:-}" = "--quick" ]; then
  quick=(--quick)
  shift
fi
scripts/setup.sh
. .venv/bin/activate
ruff check turbotts tests
mypy turbotts
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
set +e
TURBOTTS_PASS_REPORT="$reports/parallel.json" python -m pytest -n "${TURBOTTS_TEST_WORKERS:-2}" --dist worksteal \
  --partition parallel "${quick[@]}" "$@"
parallel=$?
TURBOTTS_PASS_REPORT="$reports/serial.json" python -m pytest --partition serial "${quick[@]}" "$@"
serial=$?
set -e
python -m tests.passes "$reports" "parallel:$parallel" "serial:$serial"
