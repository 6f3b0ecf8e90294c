"""The asyncio face of the engine: all asyncio and threading of the engine lives here.

The synchronous :class:`EngineCore` runs on one background thread that loops
``step()``. Callers on the event loop never touch the core: they send commands
(add, abort) through a thread-safe queue that the engine thread drains before
every step, and receive results on one ``asyncio.Queue`` per request, fed with
``call_soon_threadsafe``. Closing a request's iterator (a client that went away)
aborts it, and its KV slot is freed at the next step.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from turbotts.engine.core import EngineCore
from turbotts.engine.request import RequestOutput
from turbotts.errors import EngineError, QueueFullError, TurboTTSError
from turbotts.params import SynthesisParams

logger = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for metrics and readiness checks."""

    num_waiting: int
    num_running: int
    num_unfinished: int
    num_free_slots: int
    num_steps: int
    last_step_s: float
    last_batch_size: int
    tokens_per_s: float
    is_stepping: bool
    realtime_capacity: int = 0  # streams the engine keeps at real time plus margin (enforced unless admission off)
    is_capacity_measured: bool = False  # False until a step was timed (or the capacity is overridden)
    num_refused_realtime: int = 0  # streams refused since start (their queue wait was too long)
    step_s_by_batch: dict[int, float] = field(default_factory=dict)  # mean pure-decode step time per batch size
    num_sat_out: int = 0  # running streams the last step left out: far enough ahead of their listeners


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    outputs: asyncio.Queue[RequestOutput | BaseException] = field(default_factory=asyncio.Queue)


class AsyncEngine:
    """Runs an :class:`EngineCore` on its own thread and serves many asyncio callers."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._is_accepting = True
        self._num_steps = 0
        self._num_tokens_window: list[tuple[float, int]] = []
        self._stats = EngineStats(0, 0, 0, core.kv_layout.num_slots, 0, 0.0, 0, 0.0, False)
        self._thread = threading.Thread(target=self._loop, name="turbotts-engine", daemon=True)
        self._thread.start()

    # -- public API (event loop side) ---------------------------------------------------

    @property
    def stats(self) -> EngineStats:
        return self._stats

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def sample_rate_hz(self) -> int:
        return self.core.model.sample_rate_hz

    def count_text_tokens(self, text: str) -> int:
        """Text tokens of ``text`` for usage reports (the same front end and tokenizer as a request)."""
        return self.core.count_text_tokens(text)

    def spoken_text(self, text: str, *, normalize_text: bool = True) -> str:
        """``text`` as a request hands it to the model (front end: dictionary, normalization), for captions."""
        return self.core.spoken_text(text, normalize_text=normalize_text)

    def new_request_id(self) -> str:
        return f"req-{next(self._ids)}"

    async def generate(
        self,
        text: str,
        params: SynthesisParams,
        *,
        request_id: str | None = None,
        stream: bool = True,
        is_realtime: bool | None = None,
        playback_buffer_s: float | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Submit one synthesis and yield its outputs (audio chunks, then the final one).

        ``is_realtime`` (default: ``stream``) puts it under real-time admission; ``playback_buffer_s``
        is the listener's player buffer (default: the engine's setting), which sets its deadlines.

        Raises:
            InvalidInputError: bad text, voice or parameters (raised before any output).
            QueueFullError: the engine is full or shutting down; retry later.
            StreamCapacityError: real-time admission would keep it queued too long; retry later.
            EngineError: the engine failed while running the request.
        """
        if not self._is_accepting:
            raise QueueFullError("the engine is shutting down and takes no new work; retry on another replica")
        request_id = request_id or self.new_request_id()
        loop = asyncio.get_running_loop()
        stream_state = _Stream(loop)
        admitted: asyncio.Future[None] = loop.create_future()

        def add() -> None:
            try:
                self.core.add_request(
                    request_id,
                    text,
                    params,
                    stream=stream,
                    is_realtime=is_realtime,
                    playback_buffer_s=playback_buffer_s,
                )
            except Exception as exc:  # noqa: BLE001 - handed to the caller's future
                loop.call_soon_threadsafe(_set_exception, admitted, exc)
                return
            self._streams[request_id] = stream_state
            loop.call_soon_threadsafe(_set_result, admitted, None)

        self._send(add)
        is_done = False
        try:
            await admitted
            while True:
                item = await stream_state.outputs.get()
                if isinstance(item, BaseException):
                    raise item
                if item.is_finished:
                    is_done = True
                yield item
                if is_done:
                    return
        finally:
            if not is_done:
                self.abort(request_id)

    def abort(self, request_id: str) -> None:
        """Cancel a request from any thread; its KV memory is freed at the next step."""

        def drop() -> None:
            self._streams.pop(request_id, None)
            self.core.abort(request_id)

        self._send(drop)

    async def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight work finish for up to ``grace_s``, then abort the rest."""
        self._is_accepting = False
        deadline = time.monotonic() + grace_s
        while self._stats.num_unfinished and time.monotonic() < deadline and self.is_alive:
            await asyncio.sleep(0.05)
        self._stop.set()
        self._wake.set()
        await asyncio.to_thread(self._thread.join, 5.0)

    # -- engine thread ------------------------------------------------------------------

    def _send(self, command: Callable[[], None]) -> None:
        self._commands.put(command)
        self._wake.set()

    def _drain_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._drain_commands()
            if not self.core.has_work():
                self._publish_stats(is_stepping=False)
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            try:
                outputs = self.core.step()
            except Exception as exc:
                logger.exception("engine step failed; failing the requests in flight")
                self._fail_all(EngineError(f"the engine failed while synthesizing ({type(exc).__name__}); retry"))
                continue
            self._deliver(outputs)
            self._publish_stats(is_stepping=True)
        self._fail_all(QueueFullError("the engine stopped before this request finished; retry"))

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue
            if output.is_finished:
                del self._streams[output.request_id]
            stream.loop.call_soon_threadsafe(stream.outputs.put_nowait, output)

    def _fail_all(self, error: TurboTTSError) -> None:
        for request_id, stream in list(self._streams.items()):
            self.core.abort(request_id)
            stream.loop.call_soon_threadsafe(stream.outputs.put_nowait, error)
        self._streams.clear()

    def _publish_stats(self, *, is_stepping: bool) -> None:
        step = self.core.last_step
        now = time.perf_counter()
        batch = 0 if step is None else step.num_prefill + step.num_decode
        if is_stepping:
            self._num_steps += 1
            self._num_tokens_window.append((now, batch))
        self._num_tokens_window = [(t, n) for t, n in self._num_tokens_window if now - t < 5.0]
        span = now - self._num_tokens_window[0][0] if len(self._num_tokens_window) > 1 else 0.0
        scheduler = self.core.scheduler
        policy = scheduler.realtime
        self._stats = EngineStats(
            num_waiting=scheduler.num_waiting,
            num_running=scheduler.num_running,
            num_unfinished=self.core.num_unfinished,
            num_free_slots=scheduler.num_free_slots,
            num_steps=self._num_steps,
            last_step_s=0.0 if step is None else step.duration_s,
            last_batch_size=batch,
            tokens_per_s=sum(n for _, n in self._num_tokens_window[1:]) / span if span > 0 else 0.0,
            is_stepping=is_stepping,
            realtime_capacity=0 if policy is None else policy.capacity,
            is_capacity_measured=policy is not None and policy.is_measured,
            num_refused_realtime=scheduler.num_refused_realtime,
            step_s_by_batch={} if policy is None else policy.step_s_by_batch,
            num_sat_out=scheduler.num_sat_out,
        )


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
