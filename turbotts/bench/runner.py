"""Drive an in-process engine through a workload in one of three modes.

* ``sequential``: batch size 1, one request after another (the official-style baseline);
* ``static``: batches of up to C requests that start together and wait for their
  longest member before the next batch is admitted. As in the official package,
  every row of a static batch keeps being decoded until the longest one ends
  (finished rows are not dropped from the batch); only each request's own frames
  count as audio;
* ``continuous``: iteration-level batching, up to C running; requests join and
  leave the batch at every step.

The engine is stepped on this thread; wall-clock arrivals are honoured, so TTFA
and latency include queueing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from turbotts.bench.workload import MODES, BenchRequest
from turbotts.config import EngineConfig
from turbotts.engine.core import EngineCore
from turbotts.model.chattts import ChatTTSModel
from turbotts.params import SamplingParams, SynthesisParams


@dataclass
class RequestTiming:
    arrival_s: float
    first_audio_s: float | None = None
    finish_s: float | None = None
    num_samples: int = 0
    max_samples: int = 0  # the request's own audio; static-batch padding beyond it is not counted


@dataclass
class RunResult:
    mode: str
    concurrency: int
    wall_s: float
    audio_s: float
    timings: list[RequestTiming]
    step_s_by_batch: dict[int, list[float]] = field(default_factory=dict)


def _num_samples(request: BenchRequest) -> int:
    return 512 * request.num_frames - 256


def _params(request: BenchRequest, num_frames: int) -> SynthesisParams:
    code = SamplingParams(max_new_tokens=num_frames, ignore_eos=True)
    return SynthesisParams(code=code, refine_text=False, seed=request.seed, voice_seed=request.index)


WARMUP_FRAMES = 24


def _warm_up(core: EngineCore, requests: list[BenchRequest], batch_size: int) -> None:
    """Run a short batch first so one-time costs (oneDNN kernel creation per shape,
    first touch of the KV pages) stay out of the timed run."""
    for i in range(min(batch_size, len(requests))):
        code = SamplingParams(max_new_tokens=WARMUP_FRAMES, ignore_eos=True)
        params = SynthesisParams(code=code, refine_text=False, seed=i, voice_seed=i)
        core.add_request(f"warmup-{i}", requests[i].text, params, stream=True)
    while core.has_work():
        core.step()


def run_mode(
    model: ChatTTSModel,
    requests: list[BenchRequest],
    mode: str,
    concurrency: int,
    *,
    engine_config: EngineConfig,
    is_closed_loop: bool,
    on_finish: Callable[[], None] = lambda: None,
    is_streaming: bool = True,
) -> RunResult:
    """Run every request to completion and time it.

    ``is_streaming=False`` asks for each utterance whole (decoded once at the end, as the server does for
    buffered formats and the official package always does): its first audio is its last.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    batch_size = 1 if mode == "sequential" else concurrency
    max_frames = max(r.num_frames for r in requests)
    max_prompt = 128
    config = EngineConfig(
        max_batch_size=batch_size,
        max_waiting=len(requests) + 1,
        kv_budget_bytes=engine_config.kv_budget_bytes,
        max_seq_len=max(engine_config.max_seq_len, max_frames + max_prompt),
        streaming=engine_config.streaming,
        vocoder_dtype=engine_config.vocoder_dtype,
        kv_dtype=engine_config.kv_dtype,
        max_prefill_tokens=engine_config.max_prefill_tokens,
        admission="off",  # the bench measures what the engine can do; real-time admission would cap the batch
    )
    core = EngineCore(model, config)
    _warm_up(core, requests, batch_size)
    pending = list(requests)
    timings: dict[str, RequestTiming] = {}
    step_s_by_batch: dict[int, list[float]] = defaultdict(list)
    start = time.perf_counter()

    def admit(now: float) -> None:
        if mode == "static" and core.has_work():
            return  # a static batch runs until its longest member is done
        is_bounded = is_closed_loop or mode == "static"
        budget = concurrency - core.num_unfinished if is_bounded else len(pending)
        batch: list[BenchRequest] = []
        while pending and budget > 0:
            request = pending[0]
            if not is_closed_loop and request.arrival_s > now - start:
                break
            batch.append(pending.pop(0))
            budget -= 1
        batch_frames = max((r.num_frames for r in batch), default=0)
        for request in batch:
            arrival = now if is_closed_loop else start + request.arrival_s
            timings[str(request.index)] = RequestTiming(arrival_s=arrival, max_samples=_num_samples(request))
            frames = batch_frames if mode == "static" else request.num_frames
            core.add_request(str(request.index), request.text, _params(request, frames), stream=is_streaming)

    while pending or core.has_work():
        admit(time.perf_counter())
        if not core.has_work():
            time.sleep(min(0.005, max(0.0, start + pending[0].arrival_s - time.perf_counter())))
            continue
        outputs = core.step()
        now = time.perf_counter()
        step = core.last_step
        if step is not None and step.num_prefill == 0 and step.num_decode:
            step_s_by_batch[step.num_decode].append(step.duration_s)
        for output in outputs:
            timing = timings[output.request_id]
            if len(output.audio) and timing.first_audio_s is None:
                timing.first_audio_s = now
            timing.num_samples = min(timing.num_samples + len(output.audio), timing.max_samples)
            if output.is_finished:
                timing.finish_s = now
                on_finish()
    wall = time.perf_counter() - start
    audio_s = sum(t.num_samples for t in timings.values()) / model.sample_rate_hz
    return RunResult(mode, concurrency, wall, audio_s, list(timings.values()), dict(step_s_by_batch))
