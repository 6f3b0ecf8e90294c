"""A local Ray cluster (started in-process, loopback only) with TurboTTS deployed on 2 tiny-model replicas.

Module-scoped: starting Ray and two models costs tens of seconds on 2 cores, so
each test module shares one deployment. Settings these machines need: no usage
stats, no dashboard, no auth, Ray's temporary files under the work directory.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest_redis import MISSING_REDIS, REDIS_BINARY, RedisServer
from tests.required_tools import is_required

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'turbotts[ray]'")

REPO = Path(__file__).resolve().parents[2]
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_TMPDIR": str(REPO / ".ray-tmp"),
    "RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S": "1.0",
}
MAX_NEW_TOKENS = 12


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tiny_settings(redis_url: str, port: int, **overrides: Any) -> Any:
    from turbotts.server.settings import ServerSettings

    values: dict[str, Any] = {
        "backend": "ray",
        "load_format": "dummy",
        "dummy_size": "tiny",
        "dtype": "fp32",
        "vocoder_dtype": "fp32",
        "max_new_tokens": MAX_NEW_TOKENS,
        "kv_budget_bytes": 64 * 2**20,
        "rate_limit_rps": 0.0,
        "shutdown_grace_s": 20.0,
        "redis_url": redis_url,
        "replicas": 2,
        "replica_num_cpus": 0.5,
        "replica_threads": 1,
        "host": "127.0.0.1",
        "port": port,
        "log_format": "text",
        **overrides,
    }
    return ServerSettings(**values)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if REDIS_BINARY is None:
        if is_required("REDIS"):
            pytest.fail(MISSING_REDIS, pytrace=False)
        pytest.skip(MISSING_REDIS)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def wait_ready(url: str, num_replicas: int, timeout_s: float = 180.0) -> None:
    """Until ``/readyz`` answers 200 from ``num_replicas`` distinct replicas."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/readyz", timeout=5)
            if response.status_code == 200:
                seen.add(response.headers["x-replica"])
                if len(seen) >= num_replicas:
                    return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the Ray deployment was not ready in time ({len(seen)} replicas answered)")


@pytest.fixture(scope="module")
def ray_url(redis_url: str) -> Iterator[str]:
    """Ray started here, TurboTTS deployed on 2 replicas; the proxy's URL."""
    for name, value in RAY_ENV.items():
        os.environ.setdefault(name, value)
    Path(RAY_ENV["RAY_TMPDIR"]).mkdir(exist_ok=True)
    from ray import serve

    from turbotts.scaleout.launch import connect, deploy

    port = free_port()
    settings = tiny_settings(redis_url, port)
    connect(settings, num_cpus=2)
    try:
        deploy(settings)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, 2)
        yield url
    finally:
        serve.shutdown()
        ray.shutdown()
