#!/usr/bin/env bash
# Create .venv and install TurboTTS with its test tools. Idempotent: a second run
# only checks. torch is pinned so CPU machines take the CPU build that lies on
# disk; set TORCH_SPEC (for example "torch==2.13.0+cu128" with a matching
# --index-url in PIP_EXTRA_INDEX_URL) to install a GPU build instead. Extras: dev (the
# test tools), server, ray, locust (benchmarks/locustfile.py, whose test runs in CI) and ort
# (the ONNX Runtime vocoder measurement). The install compiles the C++ CPU kernels (setup.py: one
# build per ISA variant) against the torch installed first, so the build sees that torch
# (--no-build-isolation); a change to them or to the project files reinstalls.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
STAMP=.venv/.turbotts-installed
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
want="$TORCH_SPEC $(cat pyproject.toml setup.py turbotts/cpu/variants.py turbotts/cpu/kernels/* turbotts/bench/kernels/* \
  | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  # (the grep drops pip's notes about local package mirrors that this machine may not have)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC" \
    2> >(grep -v "^WARNING: Location" >&2)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "setuptools>=77" wheel ninja \
    2> >(grep -v "^WARNING: Location" >&2)
  started=$(date +%s)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation \
    -e '.[dev,server,ray,locust,ort]' 2> >(grep -v "^WARNING: Location" >&2)
  echo "installed, C++ kernels built, in $(( $(date +%s) - started )) s"
  echo "$want" > "$STAMP"
fi
