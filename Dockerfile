# TurboTTS image: `turbotts serve` (one process) or `turbotts serve --backend ray` (replicas on Ray Serve).
#   CPU (default):  docker build -t turbotts .
#   CUDA:           docker build -t turbotts:cu128 --build-arg VARIANT=cu128 .
#                   (torch's CUDA wheels carry the CUDA runtime: the host needs only the NVIDIA driver
#                   and the container toolkit; run with --gpus all and TURBOTTS_DEVICE=cuda)
#   No Docker Hub:  scripts/image.sh (a base image made from Debian's packages by scripts/docker_base.sh,
#                   and pip's local wheels, mirrors and CA certificate passed in from the host)
# Needs BuildKit (the default builder since Docker 23; DOCKER_BUILDKIT=1 on Docker 20.10): the runtime stage
# mounts the builder's wheels instead of copying them into a layer, and pip's CA bundle comes in as a secret.
#
# Two stages on one base (the venv moves between them as wheels, so the base's Python must match):
#   builder  a C++ compiler and torch, builds the TurboTTS wheel (whose setup.py may compile torch
#            extensions) and collects the wheels of everything it needs in /wheels
#   runtime  no compiler: installs /wheels into /opt/venv with no index, runs as uid 10001
# The venv (not the base's python3) is what `pip install` writes to, so Debian's externally managed
# /usr/bin/python3 (PEP 668) and the python image's /usr/local/bin/python3 both work.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder

# cpu, or the CUDA tag of a torch build (cu126, cu128)
ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${VARIANT}
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

# g++ for the kernels; Python.h too where the base has no headers of its own (Debian's python3 has none)
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ \
 && if [ ! -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h" ]; then \
      apt-get install -y --no-install-recommends python3-dev; fi \
 && rm -rf /var/lib/apt/lists/*

RUN python3 -m venv /opt/venv
# Where pip looks besides PyPI: unset by default. scripts/image.sh sets them to the host's own pip
# find-links and extra indexes (served on loopback), and passes the host's CA bundle as the secret pip_cert.
# (Declared after the apt step: a build arg's value is part of the cache key of every RUN below it.)
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_DEFAULT_TIMEOUT=180
# torch first, from its own index (the CPU or CUDA build); its constraint keeps every later step on that build
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && pip install --upgrade pip "setuptools>=77" wheel ninja \
 && pip wheel --wheel-dir /wheels --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
 && pip install --no-index --find-links /wheels "torch==${TORCH_VERSION}" \
 && python -c 'import torch; print(f"torch=={torch.__version__}")' > /wheels/constraints.txt

# the kernels first, from their own sources: a change to the Python code reuses this layer instead of
# compiling them again (minutes). setup.py reads pyproject.toml, whose readme must exist: an empty one here.
WORKDIR /src
COPY setup.py pyproject.toml ./
COPY turbotts/cpu/variants.py turbotts/cpu/variants.py
COPY turbotts/cpu/kernels turbotts/cpu/kernels
COPY turbotts/bench/kernels turbotts/bench/kernels
RUN touch README.md && python setup.py -q build_ext && rm README.md

# the TurboTTS wheel, built against the torch above (no build isolation: setup.py imports torch, so
# pyproject's build requirements, ninja included, are the ones installed above); its build_ext finds
# the kernels above up to date in /src/build (the context leaves build/ out, so the copy keeps it)
COPY . /src
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src

# the wheels of everything the extras need (sdists are built here, where the compiler is)
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && pip wheel --wheel-dir /wheels --find-links /wheels --constraint /wheels/constraints.txt \
      "$(ls /wheels/turbotts-*.whl)[server,ray]"


FROM ${BASE_IMAGE} AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    HF_HOME=/cache/huggingface \
    TURBOTTS_CACHE_DIR=/cache/turbotts \
    TURBOTTS_VOICES_DB=/cache/voices.sqlite3 \
    TURBOTTS_HOST=0.0.0.0 \
    RAY_USAGE_STATS_ENABLED=0

RUN useradd --create-home --uid 10001 --user-group turbotts \
 && mkdir -p /cache/huggingface /cache/turbotts \
 && chown -R turbotts:turbotts /cache

# from the builder's wheels only: no index, no network, no compiler
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m venv /opt/venv \
 && pip install --no-index --find-links /wheels --constraint /wheels/constraints.txt "turbotts[server,ray]" \
 && turbotts --help >/dev/null

USER turbotts
WORKDIR /home/turbotts
VOLUME ["/cache"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TURBOTTS_PORT', '8000'), timeout=2)"
ENTRYPOINT ["turbotts"]
CMD ["serve"]
