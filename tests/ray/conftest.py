"""A local Ray cluster (started in-process) with TurboTTS deployed on 2 tiny-model replicas.

Package-scoped: starting Ray and two models costs some 20 s on 2 cores, so the
modules here share one cluster and deployment, and it stops after the last of them.
test_ray_serve.py, which redeploys and finally deletes the application, runs after
the modules that only read from it (files run in name order). Settings these machines need: no usage
stats, no dashboard, no auth, Ray's temporary files under the work directory
(or a short directory where the checkout's path is too long for Ray's sockets).
The Serve proxy listens on 127.0.0.1 only. Ray's own processes (GCS, raylet,
agents, workers) listen on all interfaces or the machine's address, and Ray has
no option to change that: it turns a loopback ``node_ip_address`` into the
machine's routable one.

Every test here needs Ray: without it they skip ("ray is not installed"), or
fail where Ray is required (``CI=true`` or ``TURBOTTS_REQUIRE_RAY=1``). So test
modules import Ray (and :mod:`turbotts.scaleout`, which imports it) inside tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest_redis import MISSING_REDIS, REDIS_BINARY, RedisServer
from tests.required_tools import is_required

MISSING_RAY = "ray is not installed: pip install 'turbotts[ray]' to run the Ray Serve tests"
REPO = Path(__file__).resolve().parents[2]
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S": "1.0",
}
MAX_NEW_TOKENS = 12
#: Ray's sockets lie some 70 characters below its temporary directory, and a socket's path holds at most 107 bytes
MAX_RAY_TMPDIR_CHARS = 32


def _is_ray_importable() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session", autouse=True)
def _ray_installed() -> None:
    """Session scope: it runs before the module clusters, so a missing Ray never errors in their set-up."""
    if _is_ray_importable():
        return
    if is_required("RAY"):
        pytest.fail(f"{MISSING_RAY} (required because CI or TURBOTTS_REQUIRE_RAY=1 is set)", pytrace=False)
    pytest.skip(MISSING_RAY)


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
        "quant": "none",
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


def deployment_options(application: Any) -> dict[str, dict[str, Any]]:
    """The options of each deployment of a bound Serve ``application``, by name, as ``serve build`` writes them.

    No cluster: Ray builds the application locally and translates each deployment
    into the schema of a Serve config file; options left unset are Ray's defaults.
    """
    from ray.serve._private.build_app import build_app
    from ray.serve.deployment import deployment_to_schema

    from turbotts.scaleout.launch import APP_NAME

    built = build_app(application, name=APP_NAME)
    return {d.name: deployment_to_schema(d).model_dump(exclude_unset=True) for d in built.deployments}


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="session")
def ray_tmpdir() -> Iterator[Path]:
    """Ray's temporary files: ``RAY_TMPDIR`` if set, else under the work directory, else (a checkout at a long
    path, such as the mutation guard's copy: Ray would fail to bind its sockets) a short one, removed at the end."""
    if os.environ.get("RAY_TMPDIR"):
        yield Path(os.environ["RAY_TMPDIR"])
        return
    in_repo = REPO / ".ray-tmp"
    if len(str(in_repo)) <= MAX_RAY_TMPDIR_CHARS:
        in_repo.mkdir(exist_ok=True)
        yield in_repo
        return
    short = Path(tempfile.mkdtemp(prefix="turbotts-ray-"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="package")
def ray_url(redis_url: str, ray_tmpdir: Path) -> Iterator[str]:
    """Ray started here, TurboTTS deployed on 2 replicas; the proxy's URL."""
    for name, value in {**RAY_ENV, "RAY_TMPDIR": str(ray_tmpdir)}.items():
        os.environ.setdefault(name, value)
    import ray
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
