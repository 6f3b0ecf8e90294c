"""A ``turbotts serve`` subprocess on a free loopback port, for the benchmark scripts that measure a live server.

One place starts it, waits for ``/readyz`` and stops it (terminate, then kill), so the scripts that
compare server configurations (``scripts/capacity_bench.py``, ``scripts/serving_profile.py``,
``scripts/admission_figures.py``) do not each carry their own copy.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

#: full-size weights with ``auto`` precision run a quality gate before the server is ready
READY_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class LocalServer:
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def local_server(
    flags: list[str], log_path: Path, *, env: dict[str, str] | None = None, ready_timeout_s: float = READY_TIMEOUT_S
) -> Iterator[LocalServer]:
    """``turbotts serve --port P FLAGS`` (stderr to ``log_path``) until the block ends; yields once /readyz is 200.

    ``env`` is added to this process's environment. Raises RuntimeError, with the log's tail, when the
    server exits or is not ready in ``ready_timeout_s``.
    """
    port = free_port()
    command = [sys.executable, "-m", "turbotts", "serve", "--port", str(port), *flags]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=log)
    server = LocalServer(f"http://127.0.0.1:{port}", process)
    try:
        _wait_ready(server, log_path, ready_timeout_s)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: LocalServer, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while server.process.poll() is None:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"turbotts serve was not ready in {timeout_s:g} s; see {log_path}")
        time.sleep(0.5)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"turbotts serve exited (code {server.process.returncode}):\n{tail}")
