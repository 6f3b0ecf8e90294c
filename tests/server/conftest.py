"""A real TurboTTS server on loopback (uvicorn in a thread, tiny dummy model) for the server tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.conftest_redis import redis_server  # noqa: F401 - a real redis-server for the guard tests
from turbotts.server.settings import ServerSettings
from turbotts.server.web.app import create_app

MAX_NEW_TOKENS = 12  # code frames per segment: 12 * 512 samples = 0.256 s of audio at most
SAMPLE_RATE_HZ = 24000


@contextmanager
def running_server(
    tmp_dir: Path, *, wrap: Callable[[Any], Any] | None = None, **overrides: Any
) -> Iterator[tuple[str, uvicorn.Server]]:
    """Start the app on a free loopback port; yields its base URL and the uvicorn server.

    ``wrap`` puts an ASGI layer around the app (as a proxy or Ray Serve would); ``overrides`` are settings.
    """
    values: dict[str, Any] = {
        "load_format": "dummy",
        "dummy_size": "tiny",
        "dtype": "fp32",  # not auto: the same numbers on every CI machine, whatever its ISA (and no gate to wait on)
        "quant": "none",
        "vocoder_dtype": "fp32",
        "voices_db": tmp_dir / "voices.sqlite3",
        "max_new_tokens": MAX_NEW_TOKENS,
        "shutdown_grace_s": 5.0,
        "kv_budget_bytes": 64 * 2**20,
        "rate_limit_rps": 0.0,  # every test client is 127.0.0.1: tests that limit rates set their own
        # the tiny model's real-time capacity on a busy test machine is anyone's guess: tests of
        # real-time admission turn it on themselves (tests/bench/test_loadtest_admission.py)
        "admission": "off",
        **overrides,
    }
    settings = ServerSettings(**values)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(settings) if wrap is None else wrap(create_app(settings))
    config = uvicorn.Config(
        app, lifespan="on", log_level="warning", timeout_graceful_shutdown=5, ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("server"), max_input_chars=4096) as (url, _):
        yield url


@pytest.fixture()
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def exact_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server without the watermark, for tests that compare the audio of two requests sample for sample.

    The mark's payload carries the minute it was made, so two requests either side of a minute
    boundary differ in their last samples on a marked server (a real flake, seen in CI).
    """
    with running_server(tmp_path_factory.mktemp("exact"), watermark=False) as (url, _):
        yield url


@pytest.fixture()
def exact_http(exact_server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=exact_server_url, timeout=120) as client:
        yield client
