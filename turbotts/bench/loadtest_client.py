"""The load generator itself: send speech requests over HTTP (httpx, async) and record what came back.

Two arrival processes, as in ``turbotts bench``: a closed loop (``concurrency``
clients, each sending its next request when the last one ends) and an open loop
(Poisson arrivals at a rate, whatever the server does: the one that shows
queueing). Both stop at ``num_requests`` or, when ``duration_s`` is given, when no
new request may start; requests already sent run to the end (or ``timeout_s``).

Each request records what the issue asks for: status and error type, time to first
playable audio, end-to-end latency, the decoded audio duration, and the stalls of a
listener playing the stream from its first chunk (:mod:`loadtest_player`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from turbotts.bench.loadtest_audio import ByteArrival, SseAudioParser, decode_timeline
from turbotts.bench.loadtest_player import Playback, simulate_playback
from turbotts.errors import AudioReadError

SPEECH_PATH = "/v1/audio/speech"


@dataclass(frozen=True)
class LoadRequest:
    index: int
    text: str
    response_format: str
    stream_format: str  # "audio" or "sse"
    seed: int | None  # None: never cached by the server
    send_at_s: float  # after the start (open loop); 0 for closed-loop runs


@dataclass(frozen=True)
class LoadOptions:
    """What every request of a run shares."""

    url: str  # the speech endpoint itself
    body: dict[str, Any] = field(default_factory=dict)  # extra fields: model, voice, max_new_tokens
    headers: dict[str, str] = field(default_factory=dict)
    prebuffer_s: float = 0.0
    timeout_s: float = 120.0


@dataclass(frozen=True)
class RequestRecord:
    """One request's outcome; times are seconds after the request was sent, except ``sent_s`` (after the run start)."""

    index: int
    response_format: str
    sent_s: float
    status: int | None  # None: no HTTP status (connection failed)
    error_type: str | None  # None for a complete stream of audio
    first_byte_s: float | None = None
    ttfa_s: float | None = None  # first playable audio
    latency_s: float | None = None
    audio_s: float = 0.0
    cache: str | None = None  # the X-Cache header
    playback: Playback | None = None

    @property
    def is_ok(self) -> bool:
        return self.error_type is None


def speech_url(url: str) -> str:
    """A base URL gets the speech path; a URL with a path (a Ray Serve route, a proxy) is kept as given."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(path=SPEECH_PATH)) if parsed.path in ("", "/") else url


def make_requests(
    num_requests: int,
    texts: Sequence[str],
    formats: Sequence[str],
    stream_format: str,
    request_rate: float | None,
    *,
    is_seeded: bool,
    seed: int = 0,
) -> list[LoadRequest]:
    """Deterministic requests: texts and formats in turn, Poisson send times at ``request_rate``.

    Seeded requests use ``seed + text index``, so a text repeats with the same seed and is
    served from the cache the second time; unseeded ones bypass the cache.
    """
    rng = random.Random(seed)
    clock_s = 0.0
    requests = []
    for index in range(num_requests):
        if request_rate is not None and index > 0:
            clock_s += rng.expovariate(request_rate)
        text_index = index % len(texts)
        requests.append(
            LoadRequest(
                index=index,
                text=texts[text_index],
                response_format=formats[index % len(formats)],
                stream_format=stream_format,
                seed=seed + text_index if is_seeded else None,
                send_at_s=clock_s,
            )
        )
    return requests


async def send_one(
    client: httpx.AsyncClient, options: LoadOptions, request: LoadRequest, run_start_s: float
) -> RequestRecord:
    """Send one request, read it to the end, decode the audio and play it back (never raises for a bad answer)."""
    started_s = time.perf_counter()
    failed = RequestRecord(request.index, request.response_format, started_s - run_start_s, None, "unknown")
    received = _Received()
    try:
        await _receive(client, options, request, started_s, received)
        if received.status != 200:
            return replace(failed, status=received.status, error_type=received.error_type)
        decoded = await asyncio.to_thread(
            decode_timeline, request.response_format, b"".join(received.parts), received.arrivals
        )
    except httpx.HTTPError as exc:
        return replace(
            failed, status=received.status, error_type=type(exc).__name__, first_byte_s=received.first_byte_s
        )
    except AudioReadError:
        return replace(failed, status=200, error_type="bad_audio", first_byte_s=received.first_byte_s)
    error_type = received.error_type
    if error_type is None and decoded.duration_s <= 0:
        error_type = "no_audio"
    return replace(
        failed,
        status=200,
        error_type=error_type,
        first_byte_s=received.first_byte_s,
        ttfa_s=next((a.time_s for a in decoded.arrivals if a.audio_s > 0), None),
        latency_s=received.latency_s,
        audio_s=decoded.duration_s,
        cache=received.cache,
        playback=simulate_playback(decoded.arrivals, options.prebuffer_s),
    )


@dataclass
class _Received:
    """What came over the wire, filled in as it arrives (so a broken stream keeps what it had)."""

    status: int | None = None
    error_type: str | None = None
    cache: str | None = None
    parts: list[bytes] = field(default_factory=list)  # audio bytes (unwrapped from SSE)
    arrivals: list[ByteArrival] = field(default_factory=list)
    first_byte_s: float | None = None
    latency_s: float | None = None


async def _receive(
    client: httpx.AsyncClient, options: LoadOptions, request: LoadRequest, started_s: float, received: _Received
) -> None:
    body = {**options.body, "input": request.text, "response_format": request.response_format}
    if request.stream_format == "sse":
        body["stream_format"] = "sse"
    if request.seed is not None:
        body["seed"] = request.seed
    parser = SseAudioParser() if request.stream_format == "sse" else None
    async with client.stream("POST", options.url, json=body, headers=options.headers) as response:
        received.status = response.status_code
        if response.status_code != 200:
            received.error_type = _error_type(await response.aread(), response.status_code)
            return
        received.cache = response.headers.get("x-cache")
        num_bytes = 0
        async for chunk in response.aiter_bytes():
            now_s = time.perf_counter() - started_s
            received.first_byte_s = now_s if received.first_byte_s is None else received.first_byte_s
            audio = parser.feed(chunk) if parser is not None else chunk
            if audio:
                received.parts.append(audio)
                num_bytes += len(audio)
                received.arrivals.append(ByteArrival(now_s, num_bytes))
    received.latency_s = time.perf_counter() - started_s
    if parser is not None and parser.error_code is not None:
        received.error_type = parser.error_code
    elif parser is not None and not parser.is_done:
        received.error_type = "sse_truncated"


def _error_type(body: bytes, status: int) -> str:
    """``error.code`` of an OpenAI-shaped error body (``rate_limit_exceeded``, ``overloaded``), else ``http_N``."""
    try:
        error = json.loads(body).get("error")
        code = error.get("code") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        code = None
    return str(code) if code else f"http_{status}"


@dataclass(frozen=True)
class RunResult:
    records: list[RequestRecord]
    wall_s: float  # run start to the last request's end


async def run_load(
    options: LoadOptions,
    requests: Iterable[LoadRequest],
    *,
    concurrency: int | None,
    duration_s: float | None = None,
    min_requests_per_client: int = 0,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> RunResult:
    """Send ``requests``: ``concurrency`` closed-loop clients, or at their ``send_at_s`` (open loop) when None.

    ``min_requests_per_client`` (closed loop): each client keeps sending past ``duration_s`` until it
    has sent that many, so a short level still gives every listener a few requests (``requests`` may
    then be endless: :func:`turbotts.bench.loadtest_capacity` passes a generator).
    """
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    timeout = httpx.Timeout(options.timeout_s, connect=min(10.0, options.timeout_s))
    records: list[RequestRecord] = []
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start_s = time.perf_counter()

        def may_start() -> bool:
            return duration_s is None or time.perf_counter() - start_s < duration_s

        async def one(request: LoadRequest) -> None:
            record = await send_one(client, options, request, start_s)
            records.append(record)
            if on_done is not None:
                on_done(record)

        if concurrency is not None:
            pending: Iterator[LoadRequest] = iter(requests)

            async def client_loop() -> None:
                # one shared iterator: each request is sent once
                for num_sent, request in enumerate(pending):
                    if not may_start() and num_sent >= min_requests_per_client:
                        return
                    await one(request)

            await asyncio.gather(*(client_loop() for _ in range(concurrency)))
        else:
            tasks = []
            for request in requests:
                await asyncio.sleep(max(0.0, start_s + request.send_at_s - time.perf_counter()))
                if not may_start():
                    break
                tasks.append(asyncio.create_task(one(request)))
            await asyncio.gather(*tasks)
        wall_s = time.perf_counter() - start_s
    return RunResult(records=sorted(records, key=lambda r: r.index), wall_s=wall_s)
