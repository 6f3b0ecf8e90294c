#!/usr/bin/env bash
# Set up, then serve the official ChatTTS weights (downloaded on first use).
# Pass extra flags through, e.g. `scripts/serve.sh --load-format dummy --dummy-size tiny`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/turbotts serve "$@"
