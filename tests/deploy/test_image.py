"""The container image, built and served here: `scripts/image.sh` builds it (a builder stage compiles the
wheel's kernels; the runtime stage has no compiler), and the server answers speech from inside it.

Everything runs with ``--network host`` on loopback (the engine has no bridge: ``scripts/docker_base.sh``).
Without Docker this skips; in CI or with ``TURBOTTS_REQUIRE_DOCKER=1`` (``.ci/run``) it fails instead.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import soundfile as sf

from tests.required_tools import REPO, is_required
from turbotts.cpu.variants import VARIANTS

TAG = "turbotts:test"
#: Debian's docker.io client: BuildKit built in (scripts/image.sh picks it too)
DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else (shutil.which("docker") or "docker")


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built from this checkout (the base image and dockerd come from scripts/docker_base.sh)."""
    reason = ""
    if shutil.which("apt-get") is None and shutil.which("dockerd") is None:
        reason = "no Docker engine here (and no apt-get to install Debian's docker.io)"
    if reason:
        if is_required("DOCKER"):
            pytest.fail(f"{reason} (required in CI and where TURBOTTS_REQUIRE_DOCKER=1)", pytrace=False)
        pytest.skip(reason)
    built = subprocess.run(["bash", "scripts/image.sh"], cwd=REPO, env={**os.environ, "TAG": TAG},
                           capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    return TAG


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served(image: str) -> Iterator[str]:
    """``serve`` on tiny dummy weights, from the image, on a free loopback port; yields its URL."""
    port = _free_port()
    started = _docker("run", "-d", "--rm", "--network", "host", "-e", "TURBOTTS_HOST=127.0.0.1",
                      "-e", f"TURBOTTS_PORT={port}", image, "serve", "--load-format", "dummy",
                      "--dummy-size", "tiny")  # fmt: skip
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert _docker("inspect", container).returncode == 0, _docker("logs", container).stderr[-3000:]
            time.sleep(0.5)
        else:
            pytest.fail(f"the container never became ready: {_docker('logs', container).stderr[-3000:]}")
        yield url
    finally:
        _docker("rm", "-f", container)


@pytest.mark.usefixtures("int8_kernel")
def test_the_image_answers_speech_on_prebuilt_kernels(served: str) -> None:
    speech = httpx.post(f"{served}/v1/audio/speech", timeout=60,
                        json={"model": "tts-1", "input": "hello from the container", "voice": "alloy",
                              "response_format": "wav"})  # fmt: skip
    assert speech.status_code == 200, speech.text
    audio, rate = sf.read(io.BytesIO(speech.content), dtype="float32")
    assert rate == 24000 and len(audio) > 0
    metrics = httpx.get(f"{served}/metrics", timeout=30).text
    (kernels,) = [line for line in metrics.splitlines() if line.startswith("turbotts_cpu_kernel_info{")]
    assert 'source="prebuilt"' in kernels and any(f'variant="{v.name}"' in kernels for v in VARIANTS), kernels
    assert any(line.startswith("turbotts_precision_info{") for line in metrics.splitlines())  # auto decided


def test_the_image_runs_as_a_user_with_no_compiler(image: str) -> None:
    checked = _docker("run", "--rm", "--network", "host", "--entrypoint", "sh", image, "-c",
                      "id -u; for c in gcc g++ cc c++ clang; do command -v $c; done; true")  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    uid, *compilers = checked.stdout.split()
    assert uid != "0" and compilers == []


@pytest.mark.usefixtures("int8_kernel")
def test_bench_in_the_image_names_a_prebuilt_variant_and_compiles_nothing(image: str) -> None:
    """The wheel on a machine with no compiler: the kernels load prebuilt, and no build cache appears."""
    script = ("turbotts bench --load-format dummy --dummy-size tiny --quant int8 --mode continuous "
              "--num-requests 1 --concurrency 1 --output-len 4 --json /tmp/bench.json >/dev/null 2>&1 "
              "&& cat /tmp/bench.json && ls -A /cache/turbotts | wc -l >&2")  # fmt: skip
    ran = _docker("run", "--rm", "--network", "host", "--entrypoint", "sh", image, "-c", script, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout)
    kernels = report["machine"]["cpu_kernels"]
    assert kernels["source"] == "prebuilt" and kernels["variant"] in {v.name for v in VARIANTS}
    assert ran.stderr.strip().splitlines()[-1] == "0"  # the run-time build cache stayed empty
