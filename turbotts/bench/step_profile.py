"""What one decode step costs at each batch size, against the weight-bytes roofline, and what the vocoder adds.

Why: a decode step of a few rows reads every GPT weight once whatever the batch, so at batch 2-8 it
should cost little more than at batch 1; where it jumps (a kernel's row limit, a switch to fbgemm)
is where batching stops paying. Each batch's steps run through the real :class:`EngineCore` (its
scheduler, :class:`ModelRunner` and sampler), prompts prefilled first, only pure decode steps timed.
The vocoder's cost per frame comes from the real :class:`VocoderRunner` decoding the windows the
engine's default streaming chunks make, for ``b`` streams in lockstep (one batched call per window).

The report and the command line are :mod:`turbotts.bench.step_profile_command`'s.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from turbotts.config import EngineConfig, StreamingConfig
from turbotts.cpu import int8_decode, int8_gemv, int8_prefill
from turbotts.cpu.quant import Int8Linear
from turbotts.engine.core import EngineCore
from turbotts.engine.streaming import AudioStream, DecodeWindow
from turbotts.engine.vocoder_runner import VocoderRunner
from turbotts.model.chattts import ChatTTSModel
from turbotts.params import SamplingParams, SynthesisParams

PROMPT_TEXT = "the quick brown fox jumps over the lazy dog near the riverbank today"
#: one stream's code frames per second of audio: 24 kHz, 512 samples a frame
FRAMES_PER_S_PER_STREAM = 24000 / 512
#: a callback per finished unit of work (a timed step, a decoded window)
OnProgress = Callable[[], None]


@dataclass(frozen=True)
class StepProfilePlan:
    """What to time: decode steps per batch size, and how long an utterance the vocoder streams."""

    batch_sizes: list[int]
    num_steps: int
    num_warmup_steps: int
    num_vocoder_frames: int
    #: passes over every batch size, each timing ``num_steps`` steps of each: on a shared machine a noisy
    #: stretch then lands on several batch sizes a little, not on one a lot
    num_rounds: int = 2
    #: the vocoder's calls per window at each batch size, of which the fastest counts (as the bandwidth probes)
    num_vocoder_repeats: int = 3
    streaming: StreamingConfig = field(default_factory=StreamingConfig)

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("batch sizes must be at least 1")
        if self.num_steps < 1 or self.num_warmup_steps < 0:
            raise ValueError("--steps must be at least 1 and --warmup-steps at least 0")
        if self.num_rounds < 1 or self.num_vocoder_repeats < 1:
            raise ValueError("--rounds and --vocoder-repeats must be at least 1")
        if self.num_vocoder_frames < self.streaming.first_chunk_frames + self.streaming.first_chunk_lookahead_frames:
            raise ValueError("--vocoder-frames must cover at least the first streamed chunk and its lookahead")


@dataclass(frozen=True)
class BatchStepTimes:
    """One batch size's pure decode steps (seconds each) and the int8 path its matmuls took."""

    batch_size: int
    step_s: list[float]
    int8_path: str
    #: tokens in the KV cache over all rows at each timed step: what attention reads besides the weights
    num_cached_tokens: list[int]


@dataclass(frozen=True)
class StepProfile:
    """What :func:`run_profile` measured, and the dtypes it ran with."""

    steps: list[BatchStepTimes]
    vocoder_s_per_frame: dict[int, float]
    vocoder_dtype: str
    kv_dtype: torch.dtype


def int8_path(model: ChatTTSModel, num_rows: int) -> str:
    """Which int8 code runs the GPT matmuls of a decode step of ``num_rows`` rows (mirrors
    :meth:`Int8DecodeStack.accepts`, the stack's C++ row limit and :meth:`Int8Linear.__call__`)."""
    gpt = model.modules.gpt
    linears = [v for m in gpt.modules() for v in vars(m).values() if isinstance(v, Int8Linear)]
    if not linears:
        return "no int8"
    stack = gpt.fused_decode
    max_rows = getattr(stack, "max_rows", None)
    if stack is not None and (max_rows is None or num_rows <= max_rows):
        matmuls = "tile kernel" if num_rows <= int8_decode.MAX_ROWS else "fbgemm"
        return f"fused stack + {matmuls}"
    linear = linears[0]
    if linear.tiles is not None and num_rows <= int8_gemv.MAX_ROWS:
        return "layer by layer + int8_gemv kernel"
    if linear.onednn is not None and num_rows >= int8_prefill.MIN_ROWS:
        return "layer by layer + onednn"
    return "layer by layer + fbgemm"


def profile_engine_config(plan: StepProfilePlan, vocoder_dtype: str) -> EngineConfig:
    """An engine that admits every row at once (no real-time cap), the serving defaults otherwise."""
    return EngineConfig(
        max_batch_size=max(plan.batch_sizes),
        streaming=plan.streaming,
        vocoder_dtype=vocoder_dtype,
        admission="off",
        kv_budget_bytes=2 * 2**30,
        max_seq_len=1024,
    )


def time_decode_steps(
    core: EngineCore, batch_size: int, plan: StepProfilePlan, on_step: OnProgress | None = None
) -> BatchStepTimes:
    """Prefill ``batch_size`` requests, then time ``plan.num_steps`` steps in which all of them decode.

    The requests ignore EOS and ask for more frames than the steps run, so no row leaves mid-run;
    they are whole-utterance requests, so no vocoder call falls in a timed step. They are aborted
    (and their slots freed) before this returns.
    """
    num_frames = plan.num_warmup_steps + plan.num_steps + 8
    ids = [f"b{batch_size}-{row}" for row in range(batch_size)]
    requests = []
    for row, request_id in enumerate(ids):
        code = SamplingParams(max_new_tokens=num_frames, ignore_eos=True)
        params = SynthesisParams(code=code, refine_text=False, seed=row, voice_seed=row)
        requests.append(core.add_request(request_id, PROMPT_TEXT, params, stream=False, is_realtime=False))
    step_s: list[float] = []
    num_cached: list[int] = []
    num_warm = 0
    while len(step_s) < plan.num_steps:
        core.step()
        last = core.last_step
        assert last is not None  # set by every step
        if last.num_prefill or last.num_decode != batch_size:
            continue  # prefill steps, and any step that mixes them in, are not pure decode steps
        if num_warm < plan.num_warmup_steps:
            num_warm += 1
            continue
        step_s.append(last.duration_s)
        num_cached.append(sum(request.sequence.num_cached_tokens for request in requests))
        if on_step is not None:
            on_step()
    for request_id in ids:
        core.abort(request_id)
    while core.has_work():
        core.step()  # frees the aborted slots
    return BatchStepTimes(batch_size, step_s, int8_path(core.model, batch_size), num_cached)


def stream_windows(model: ChatTTSModel, streaming: StreamingConfig, num_frames: int) -> list[DecodeWindow]:
    """The windows one streamed utterance of ``num_frames`` frames is decoded in, chunk by chunk as the
    engine makes them (the Decoder path, the default): random hidden states, as cost does not depend on them."""
    generator = torch.Generator().manual_seed(0)
    config = model.config.gpt
    stream = AudioStream("stream", streaming, use_decoder=True, is_streaming=True)
    windows: list[DecodeWindow] = []
    for frame in range(num_frames + 1):
        if frame == num_frames:
            stream.complete()
        else:
            stream.append([0] * config.num_vq, torch.randn(config.hidden_size, generator=generator))
        window = stream.next_window()
        if window is not None:
            windows.append(window)
            stream.mark_emitted(window)
    return windows


def time_vocoder(
    vocoder: VocoderRunner,
    windows: list[DecodeWindow],
    batch_size: int,
    num_repeats: int = 1,
    on_window: OnProgress | None = None,
) -> float:
    """Seconds of vocoder work per emitted frame when ``batch_size`` streams reach each window together
    (one :meth:`VocoderRunner.decode` call per window, as the engine's step makes it; the fastest of
    ``num_repeats`` calls per window)."""
    total_s = 0.0
    for window in windows:
        batch = [dataclasses.replace(window, request_id=f"s{row}") for row in range(batch_size)]
        best_s = float("inf")
        for _ in range(num_repeats):
            start = time.perf_counter()
            vocoder.decode(batch)
            best_s = min(best_s, time.perf_counter() - start)
        total_s += best_s
        if on_window is not None:
            on_window()
    num_frames = sum(w.keep_to - w.keep_from for w in windows) / 512
    return total_s / (batch_size * num_frames)


def batch_row(
    steps: BatchStepTimes, vocoder_s_per_frame: float, weight_bytes: int, kv_bytes_per_token: int, bandwidth: float
) -> dict[str, Any]:
    """One batch size's line of the report: step time, its multiple of the weight-bytes roofline (and of
    weights plus the KV cache attention reads), frames per second and whether ``b`` streams keep real
    time with the vocoder's cost per frame added."""
    b = steps.batch_size
    floor_s = weight_bytes / bandwidth
    kv_bytes = kv_bytes_per_token * statistics.median(steps.num_cached_tokens)
    median_s = statistics.median(steps.step_s)
    p90_s = statistics.quantiles(steps.step_s, n=10)[-1] if len(steps.step_s) > 1 else median_s
    frames_per_s = b / median_s
    # each frame costs its share of a step plus its vocoder time
    frames_per_s_with_vocoder = 1.0 / (median_s / b + vocoder_s_per_frame)
    needed = b * FRAMES_PER_S_PER_STREAM
    return {
        "batch_size": b,
        "int8_path": steps.int8_path,
        "num_steps": len(steps.step_s),
        "step_ms": {"p50": 1000 * median_s, "p90": 1000 * p90_s, "min": 1000 * min(steps.step_s)},
        "step_ms_per_row": 1000 * median_s / b,
        "x_roofline": median_s / floor_s,
        "cached_tokens_per_row": statistics.median(steps.num_cached_tokens) / b,
        "kv_read_bytes": kv_bytes,
        "x_roofline_with_kv": median_s * bandwidth / (weight_bytes + kv_bytes),
        "frames_per_s": frames_per_s,
        "vocoder_ms_per_frame": 1000 * vocoder_s_per_frame,
        "frames_per_s_with_vocoder": frames_per_s_with_vocoder,
        "realtime_frames_per_s": needed,
        "is_realtime_gpt_only": frames_per_s >= needed,
        "is_realtime": frames_per_s_with_vocoder >= needed,
    }


def run_profile(
    model: ChatTTSModel,
    plan: StepProfilePlan,
    vocoder_dtype: str,
    on_step: OnProgress | None = None,
    on_window: OnProgress | None = None,
) -> StepProfile:
    """Every batch size's decode steps (``plan.num_rounds`` passes over the sizes), then the vocoder's seconds
    per frame at each; and the vocoder dtype run."""
    core = EngineCore(model, profile_engine_config(plan, vocoder_dtype))
    time_decode_steps(core, 1, dataclasses.replace(plan, num_steps=1, num_warmup_steps=2))  # one-time costs out
    steps = [BatchStepTimes(b, [], int8_path(model, b), []) for b in plan.batch_sizes]
    for _ in range(plan.num_rounds):
        for pooled in steps:
            timed = time_decode_steps(core, pooled.batch_size, plan, on_step)
            pooled.step_s.extend(timed.step_s)
            pooled.num_cached_tokens.extend(timed.num_cached_tokens)
    windows = stream_windows(model, plan.streaming, plan.num_vocoder_frames)
    time_vocoder(core.vocoder, windows, 1)  # warm up: first calls pay one-time costs per shape
    vocoder = {b: time_vocoder(core.vocoder, windows, b, plan.num_vocoder_repeats, on_window) for b in plan.batch_sizes}
    return StepProfile(steps, vocoder, core.vocoder_dtype, core.runner.cache.data.dtype)
