"""SIGTERM drains a real ``turbotts serve`` process: 503 for new work, in-flight audio completes, exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.server.audio import decode
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH

LONG = {"input": "A long request that is still speaking when the signal comes. " * 6, "seed": 3, "max_new_tokens": 200}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TURBOTTS_VOICES_DB": str(tmp_path / "voices.sqlite3"),
        "TURBOTTS_SHUTDOWN_GRACE_S": "120",
        "TURBOTTS_MAX_NEW_TOKENS": "200",
        "TURBOTTS_RATE_LIMIT_RPS": "0",
    }
    command = [sys.executable, "-m", "turbotts", "serve", "--load-format", "dummy", "--dummy-size", "tiny",
               "--port", str(port), "--cache-max-bytes", "0", "--log-format", "text"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"turbotts serve did not become ready: {process.communicate()[1][-2000:]!r}")


def test_sigterm_drains_then_exits_zero(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start(tmp_path, port)
    try:
        reference = httpx.post(f"{url}{SPEECH}", json={**LONG, "response_format": "pcm"}, timeout=300)
        assert reference.status_code == 200 and reference.headers["x-cache"] == "miss"
        first_bytes, result = threading.Event(), {}

        def long_request() -> None:
            with httpx.stream("POST", f"{url}{SPEECH}", json={**LONG, "response_format": "wav"}, timeout=300) as r:
                parts = []
                for part in r.iter_bytes():
                    parts.append(part)
                    first_bytes.set()
                result["status"], result["body"] = r.status_code, b"".join(parts)
            first_bytes.set()

        thread = threading.Thread(target=long_request)
        thread.start()
        assert first_bytes.wait(300)
        assert "status" not in result, "the request must still be streaming when the signal comes"
        process.send_signal(signal.SIGTERM)
        ready = httpx.get(f"{url}/readyz", timeout=30)
        refused = httpx.post(f"{url}{SPEECH}", json={"input": "New work.", "response_format": "pcm"}, timeout=30)
        thread.join(300)
        assert process.wait(120) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert ready.status_code == 503
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "shutting_down"
    assert result["status"] == 200
    rate, samples = decode(result["body"], "wav")  # type: ignore[arg-type]
    assert rate == 24000 and samples.size == len(reference.content) // 2 > 24000


def test_readyz_is_503_when_the_engine_thread_stopped(tmp_path: Path) -> None:
    with running_server(tmp_path) as (url, server):
        assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
        engine = server.config.app.state.engine
        asyncio.run(engine.shutdown(0.0))  # the engine thread ends, as when it crashes
        assert not engine.is_alive
        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json() == {"status": "unavailable", "detail": "engine thread stopped"}
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200  # alive, just not ready
