"""SIGTERM drains a real ``turbotts serve`` process: 503 for new work, in-flight audio completes, exit 0."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import httpx

from tests.serve_process import start_serve
from tests.server.audio import decode
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH

DUMMY_TINY = ("--load-format", "dummy", "--dummy-size", "tiny")
LONG = {"input": "A long request that is still speaking when the signal comes. " * 6, "seed": 3, "max_new_tokens": 200}


def test_sigterm_drains_then_exits_zero(tmp_path: Path) -> None:
    process, url = start_serve(
        tmp_path, *DUMMY_TINY, "--cache-max-bytes", "0",
        env={"TURBOTTS_SHUTDOWN_GRACE_S": "120", "TURBOTTS_MAX_NEW_TOKENS": "200"},
    )  # fmt: skip
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
