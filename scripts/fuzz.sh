#!/usr/bin/env bash
# Fuzz a live server on tiny dummy weights: N mixed malformed and valid requests (HTTP and WebSocket).
# Prints a JSON report (status counts, 5xx, dropped connections, server RSS at start and end) and
# exits 1 if anything went wrong. Usage: scripts/fuzz.sh N [turbotts fuzz options, e.g. --json out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  [ -x .venv/bin/python ] || scripts/setup.sh
  PYTHON=.venv/bin/python
fi
exec "$PYTHON" -m turbotts fuzz "${1:-1000}" "${@:2}"
