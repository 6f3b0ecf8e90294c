#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (tiny model, real Redis and HTTP on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. .venv/bin/activate
ruff check turbotts tests
mypy turbotts
python -m pytest "$@"
