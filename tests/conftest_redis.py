"""A real, throwaway redis-server per test, on a free loopback port.

No mocks: the L2 cache and the Lua rate limiter are tested against the real
thing. The server can be stopped and started again on the same port, to test
outages and recovery. Import the fixture into a package's conftest.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.required_tools import is_required

REDIS_BINARY = shutil.which("redis-server")
MISSING_REDIS = "redis-server is not on PATH; install it (apt-get install redis-server) to run the Redis tests"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process we own; stop() and start() keep the port."""

    def __init__(self, workdir: Path) -> None:
        assert REDIS_BINARY is not None
        self.port = free_port()
        self.workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 5.0) -> None:
        self._process = subprocess.Popen(
            [
                REDIS_BINARY or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while not _answers_ping(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.kill()
        self._process.wait(timeout=5)
        self._process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_BINARY is None:
        if is_required("REDIS"):
            pytest.fail(f"{MISSING_REDIS} (required because CI or TURBOTTS_REQUIRE_REDIS=1 is set)", pytrace=False)
        pytest.skip(MISSING_REDIS)
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
