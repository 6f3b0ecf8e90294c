"""Look-ahead is bounded however long the text, and memory shows it.

A real ``turbotts serve`` process (its RSS is the server's alone) gets a long
request from a client that stops reading after the first bytes. With the bound,
the server synthesizes ``max_segments_in_flight`` segments and waits for the
client; without it, it would synthesize every segment and hold all their audio.
The test asserts the bound from the server's own gauges, and the RSS while the
client stalls, with segments long enough (up to 0.4 MB of audio each, about 60)
that unbounded look-ahead would add tens of MiB.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from tests.serve_process import start_serve
from tests.server.guards_util import metric

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
         "lima", "mike", "november", "oscar")  # fmt: skip
NUM_SENTENCES = 120  # packed two to a segment by the splitter: about 60 segments
FRAMES_PER_SEGMENT = 200  # 200 * 512 samples * 4 bytes ≈ 0.4 MB of float32 audio per segment
MIB = 2**20


def _distinct_sentences(count: int, offset: int = 0) -> str:
    return " ".join(
        f"The {WORDS[(i + offset) % 15]} {WORDS[(i // 15 + offset) % 15]} fox jumps over the lazy dog, then rests."
        for i in range(count)
    )


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _open_stalled_stream(url: str, text: str) -> socket.socket:
    """POST a streamed PCM request on a raw socket with a tiny receive buffer, read its first bytes, stop reading."""
    import json

    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"input": text, "response_format": "pcm", "seed": 1}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    sock.sendall(head + body)
    assert b" 200 " in sock.recv(1024).split(b"\r\n", 1)[0]
    return sock


def _wait_until_engine_idle(url: str, timeout_s: float = 300) -> None:
    """Until the engine has nothing running or waiting for a few polls in a row: all a stall lets it do is done."""
    deadline, idle_polls = time.monotonic() + timeout_s, 0
    while idle_polls < 5:
        assert time.monotonic() < deadline, "the engine never went idle"
        busy = metric(url, "turbotts_running_sequences") + metric(url, "turbotts_queue_depth")
        idle_polls = idle_polls + 1 if busy == 0 else 0
        time.sleep(0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
def test_a_stalled_client_holds_at_most_two_segments(tmp_path: Path) -> None:
    env = {"TURBOTTS_MAX_INPUT_CHARS": "60000", "TURBOTTS_MAX_NEW_TOKENS": str(FRAMES_PER_SEGMENT),
           "TURBOTTS_LOG_LEVEL": "warning"}  # fmt: skip
    process, url = start_serve(tmp_path, "--load-format", "dummy", "--cache-max-bytes", "0", env=env)
    try:
        text = _distinct_sentences(NUM_SENTENCES)  # no two alike: nothing is shared or cached
        # warm up on a request of the same shape, read to the end: allocators reach their steady state
        warm = _open_stalled_stream(url, _distinct_sentences(NUM_SENTENCES, offset=7))
        while warm.recv(65536):
            pass
        warm.close()
        _wait_until_engine_idle(url)
        rss_before = _rss_bytes(process.pid)
        warm_engine_requests = metric(url, "turbotts_engine_requests_total")
        stalled = _open_stalled_stream(url, text)
        _wait_until_engine_idle(url)
        rss_stalled = _rss_bytes(process.pid)
        in_flight_stalled = metric(url, "turbotts_segments_in_flight")
        num_engine_requests = metric(url, "turbotts_engine_requests_total") - warm_engine_requests
        num_bytes = 0
        while chunk := stalled.recv(1 << 20):
            num_bytes += len(chunk)
        stalled.close()
        peak = metric(url, "turbotts_segments_in_flight_peak")
        in_flight_after = metric(url, "turbotts_segments_in_flight")
        total_engine_requests = metric(url, "turbotts_engine_requests_total") - warm_engine_requests
    finally:
        process.terminate()
        process.wait(30)
    growth = rss_stalled - rss_before
    print(
        f"\nstalled client: {in_flight_stalled:.0f} segments in flight, {num_engine_requests:.0f} engine requests "
        f"so far, RSS {rss_before / MIB:.1f} -> {rss_stalled / MIB:.1f} MiB (+{growth / MIB:.1f}); then "
        f"{num_bytes} bytes read, {total_engine_requests:.0f} engine requests in all, peak look-ahead {peak:.0f}"
    )
    assert peak == 2  # the look-ahead happens (2) and is bounded (not 3, not NUM_SEGMENTS)
    assert in_flight_stalled <= 2 and in_flight_after == 0
    # the stall stops synthesis: what passed is the look-ahead plus what the kernel's socket buffers absorbed
    assert num_engine_requests < total_engine_requests / 2
    assert total_engine_requests >= NUM_SENTENCES / 2  # the text really was many segments, all synthesized
    assert num_bytes > NUM_SENTENCES / 2 * FRAMES_PER_SEGMENT * 512  # ≥ half of the audio asked for, in 16-bit PCM
    assert growth < 24 * MIB  # measured: +11 MiB bounded, +44 MiB with the bound removed
