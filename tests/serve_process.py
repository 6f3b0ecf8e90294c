"""A real ``turbotts serve`` subprocess on a free loopback port, for tests that need the command itself."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``turbotts serve ARGS`` (stderr piped) and wait until /readyz answers 200.

    Raises:
        RuntimeError: the server exited or was not ready within two minutes (its stderr is in the message).
    """
    port = free_port()
    full_env = {
        **os.environ,
        "TURBOTTS_VOICES_DB": str(tmp_path / "voices.sqlite3"),
        "TURBOTTS_RATE_LIMIT_RPS": "0",
        "TURBOTTS_DTYPE": "fp32",  # not auto: the same numbers on every CI machine, whatever its ISA
        "TURBOTTS_QUANT": "none",
        "TURBOTTS_VOCODER_DTYPE": "fp32",
        "TURBOTTS_ADMISSION": "off",  # as in tests/server/conftest.py: admission tests turn it on
        **(env or {}),
    }
    command = [sys.executable, "-m", "turbotts", "serve", "--port", str(port), "--log-format", "text", *args]
    process = subprocess.Popen(command, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"turbotts serve did not become ready: {process.communicate()[1][-3000:]!r}")


@contextlib.contextmanager
def serving(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, list[str]]]:
    """``start_serve`` as a context: yields the URL and, once stopped, fills the list with its stderr lines."""
    process, url = start_serve(tmp_path, *args, env=env)
    log: list[str] = []
    try:
        yield url, log
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        log.extend(stderr.decode("utf-8", "replace").splitlines())
