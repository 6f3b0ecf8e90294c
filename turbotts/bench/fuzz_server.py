"""A live ``turbotts serve`` subprocess on tiny dummy weights, for the fuzzer.

A real process (not an in-thread server) so that a crash shows as an exit, its
memory can be read from ``/proc/<pid>/status``, and its log can be searched
for tracebacks: an unhandled exception is a bug even when a response went out.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from turbotts.bench.fuzz_client import build_request, exchange

START_TIMEOUT_S = 180.0


@dataclass
class ServerProcess:
    """The server's address, process and log file."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def is_alive(self) -> bool:
        return self.process.poll() is None

    def rss_bytes(self) -> int | None:
        """Resident memory (``VmRSS``), or None once the process is gone."""
        return rss_bytes(self.process.pid)

    def tracebacks(self) -> list[str]:
        """The tracebacks in the server's log (the first 30 lines of each)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return ["\n".join(lines[i : i + 30]) for i, line in enumerate(lines) if line.startswith("Traceback")]


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of a process from ``/proc/<pid>/status``, in bytes (None: no such process, or no /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # the kernel reports kB
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_server(work_dir: Path, max_new_tokens: int = 4) -> Iterator[ServerProcess]:
    """Start ``turbotts serve`` on dummy tiny weights on a free loopback port; stop it (SIGTERM) afterwards.

    Raises:
        RuntimeError: the server exited or did not become ready.
    """
    host, port = "127.0.0.1", free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TURBOTTS_VOICES_DB": str(work_dir / "voices.sqlite3"),
        "TURBOTTS_MAX_NEW_TOKENS": str(max_new_tokens),
        "TURBOTTS_RATE_LIMIT_RPS": "0",  # every fuzz request comes from 127.0.0.1
        "TURBOTTS_SHUTDOWN_GRACE_S": "5",
    }
    command = [sys.executable, "-m", "turbotts", "serve", "--load-format", "dummy", "--dummy-size", "tiny",
               "--host", host, "--port", str(port), "--log-format", "text"]  # fmt: skip
    log_path = work_dir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = ServerProcess(host, port, process, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        if server.is_alive:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(server: ServerProcess) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    request = build_request("GET", "/readyz")
    while time.monotonic() < deadline:
        if not server.is_alive:
            raise RuntimeError(f"turbotts serve exited: {server.log_path.read_text(errors='replace')[-2000:]}")
        if asyncio.run(exchange(server.host, server.port, request, timeout_s=5)).status == 200:
            return
        time.sleep(0.2)
    raise RuntimeError(f"turbotts serve was not ready after {START_TIMEOUT_S:.0f} s; see {server.log_path}")
