"""Memory stays flat however long the text: a 50,000-character request against a 500-character one.

The server runs in its own process (``turbotts serve``) so its peak RSS (VmHWM)
is the server's alone. Segments are synthesized at most two ahead and streamed
as they come, so the peak after the long request should hardly move.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

SENTENCE = "The quick brown fox jumps over the lazy dog, then rests a while. "
MIB = 2**20


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _stream_pcm(url: str, text: str) -> int:
    body = {"input": text, "response_format": "pcm", "seed": 1, "max_new_tokens": 2}
    num_bytes = 0
    with httpx.Client(timeout=600) as client, client.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_bytes():
            num_bytes += len(chunk)
    return num_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
def test_peak_rss_is_flat_from_500_to_50000_characters(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "TURBOTTS_MAX_INPUT_CHARS": "60000",
        "TURBOTTS_VOICES_DB": str(tmp_path / "voices.sqlite3"),
        "TURBOTTS_KV_BUDGET_BYTES": str(64 * MIB),
        "TURBOTTS_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "turbotts", "serve", "--load-format", "dummy", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        short_text = (SENTENCE * 8)[:500]
        long_text = (SENTENCE * 800)[:50_000]
        _stream_pcm(url, short_text)  # warm up allocators and caches
        short_bytes = _stream_pcm(url, short_text)
        peak_short = _peak_rss_bytes(process.pid)
        started = time.monotonic()
        long_bytes = _stream_pcm(url, long_text)
        elapsed_s = time.monotonic() - started
        peak_long = _peak_rss_bytes(process.pid)
        rss_now = psutil.Process(process.pid).memory_info().rss
    finally:
        process.terminate()
        process.wait(30)
    growth = peak_long - peak_short
    print(
        f"\npeak RSS after 500 chars: {peak_short / MIB:.1f} MiB; after 50,000 chars: {peak_long / MIB:.1f} MiB "
        f"(+{growth / MIB:.1f} MiB); RSS now {rss_now / MIB:.1f} MiB; audio {short_bytes} vs {long_bytes} bytes; "
        f"long request took {elapsed_s:.1f} s"
    )
    assert long_bytes > 50 * short_bytes  # the long text really was synthesized, segment by segment
    assert growth < 40 * MIB
