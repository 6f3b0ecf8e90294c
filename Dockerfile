# TurboTTS image: `turbotts serve` (one process) or `turbotts serve --backend ray` (replicas on Ray Serve).
#   CPU (default):  docker build -t turbotts .
#   CUDA:           docker build -t turbotts:cu128 --build-arg VARIANT=cu128 .
#                   (torch's CUDA wheels carry the CUDA runtime: the host needs only the NVIDIA driver
#                   and the container toolkit; run with --gpus all and TURBOTTS_DEVICE=cuda)
# Not built in this repository's CI (no container engine there); see README "Scale-out".
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

# cpu, or the CUDA tag of a torch build (cu126, cu128)
ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${VARIANT}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HOME=/cache/huggingface \
    TURBOTTS_HOST=0.0.0.0 \
    TURBOTTS_VOICES_DB=/cache/voices.sqlite3 \
    RAY_USAGE_STATS_ENABLED=0

RUN useradd --create-home --uid 10001 turbotts && mkdir -p /cache && chown turbotts /cache
WORKDIR /app
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md ./
COPY turbotts ./turbotts
RUN pip install ".[server,ray]"

USER turbotts
VOLUME ["/cache"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
ENTRYPOINT ["turbotts"]
CMD ["serve"]
