#!/usr/bin/env bash
# The mutation guard (tests/mutations/README.md): each patch breaks one guarantee; its named tests must fail.
# Usage: scripts/mutations.sh [NAME ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/mutations.py "$@"
