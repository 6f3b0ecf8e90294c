#!/usr/bin/env bash
# Create .venv and install TurboTTS with its test tools. Idempotent: a second run
# only checks. torch is pinned so CPU machines take the CPU build that lies on
# disk; set TORCH_SPEC (for example "torch==2.13.0+cu128" with a matching
# --index-url in PIP_EXTRA_INDEX_URL) to install a GPU build instead. Extras: dev (the
# test tools), server, ray, and locust (benchmarks/locustfile.py, whose test runs in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
STAMP=.venv/.turbotts-installed
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
want="$TORCH_SPEC $(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  # (the grep drops pip's notes about local package mirrors that this machine may not have)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC" \
    2> >(grep -v "^WARNING: Location" >&2)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,server,ray,locust]' \
    2> >(grep -v "^WARNING: Location" >&2)
  echo "$want" > "$STAMP"
fi
