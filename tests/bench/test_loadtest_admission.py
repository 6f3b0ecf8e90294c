"""Real-time admission seen by ``turbotts loadtest``: a real server on loopback (tiny dummy model).

The same overload twice: N streaming clients at once against a server whose real-time capacity
is forced to one stream. With ``admission=realtime`` the extra streams wait in the queue (one
after the other) or get 503 (Retry-After, JSON body), and every admitted stream plays without a
stall; with ``admission=off`` all N start at once, the batch runs below real time, and the
listeners stall.

Why the load is measured out, not fixed: whether a listener stalls depends on the engine's step
time against the audio it has buffered, and the tiny model's step time differs tenfold between
an idle AVX-512 box and a loaded 2-core one (fixed numbers stalled too little on the first and
too much on the second). So each test first times this machine (:func:`plan_load`): the mean
step of one stream alone and of N streams together (vocoder work included, as the listener waits
for it), with the server's engine settings and on one torch thread (see ``one_torch_thread``).
Then it shapes the load from those numbers:

- frames per stream and the listener's startup buffer, chosen on the engine's own chunk schedule
  and the loadtest's own player (:func:`turbotts.bench.loadtest_player.simulate_playback`) so that
  one stream alone plays without a stall even with steps ``MARGIN`` times slower than measured,
  and N streams stall (over 100 ms) even with steps ``MARGIN`` times faster;
- N: 128, or 256 where 128 streams are not slow enough against one for that margin;
- the queue-wait limit: a few streams' time, so a few streams are admitted and the rest refused.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from typer.testing import CliRunner

from tests.server.conftest import running_server
from tests.server.test_metrics_values import samples, value
from turbotts.bench.loadtest_player import CONTINUITY_STALL_S, AudioArrival, simulate_playback
from turbotts.cli import app
from turbotts.config import EngineConfig, StreamingConfig
from turbotts.engine.core import EngineCore
from turbotts.engine.decode_path import kv_cache_dtype
from turbotts.engine.streaming import AudioStream
from turbotts.model.chattts import ChatTTSModel
from turbotts.params import SamplingParams, SynthesisParams
from turbotts.sources import ModelSource, load_model

LINES = ("Hello there, how are you today?", "The weather is nice and warm.", "今天天气很好。", "This is a test.")
SAMPLE_RATE_HZ = 24000
MARGIN = 3.0  # each outcome holds with steps this many times slower (alone) or faster (together) than measured
MIN_MARGIN = 2.0  # below this the machine cannot tell the two outcomes apart reliably: the test says so and fails
CLIENT_CHOICES = (128, 256)
FRAME_CHOICES = range(44, 201, 4)  # code frames per stream (21.3 ms of audio each)
PREBUFFER_CHOICES_S = (0.5, 1.0, 2.0)  # the listener's startup buffer
CALIBRATION_FRAMES = 48  # past the first two chunks, so their vocoder work is in the mean step
# the queue-wait limit in streams' time: a second stream is admitted even if the server's steps run MARGIN times
# slower than measured; random weights that end streams early (EOS) only let more in
QUEUED_STREAMS = MARGIN + 1.5
MAX_SEQ_LEN = 2048  # the server's default, which sizes its KV slots


@dataclass(frozen=True)
class LoadPlan:
    """The load shaped for this machine, with the measurements and the player's limits it came from."""

    num_clients: int
    num_frames: int
    prebuffer_s: float
    step_s_alone: float  # measured: mean step of one stream
    step_s_together: float  # measured: mean step of num_clients streams
    max_step_s_without_stall: float  # simulated: the slowest step at which a listener never stalls
    min_step_s_with_stall: float  # simulated: the fastest step at which a listener stalls over 100 ms

    @property
    def margin(self) -> float:
        """How far either measurement may drift before its outcome is no longer certain."""
        alone = self.max_step_s_without_stall / self.step_s_alone
        return min(alone, self.step_s_together / self.min_step_s_with_stall)

    @property
    def max_queue_wait_s(self) -> float:
        return QUEUED_STREAMS * self.num_frames * self.step_s_alone

    def server_settings(self) -> dict[str, Any]:
        kv_bytes = self.num_clients * MAX_SEQ_LEN * _kv_bytes_per_token()
        return {"max_new_tokens": self.num_frames, "max_batch_size": self.num_clients, "kv_budget_bytes": kv_bytes}

    def loadtest_args(self) -> list[str]:
        return ["--concurrency", str(self.num_clients), "--num-requests", str(self.num_clients), "--max-new-tokens",
                str(self.num_frames), "--prebuffer-ms", str(round(1000 * self.prebuffer_s))]  # fmt: skip


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Time and run the engine on one torch thread.

    Two threads on a 2-core machine shared with other work wait for each other at every barrier:
    the tiny model's step measured about ten times slower and erratic there (178 ms against
    11-22 ms on one thread), which no calibration can follow. One thread slows down smoothly with
    the CPU share it gets.
    """
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(num_threads)


def plan_load() -> LoadPlan:
    """Time this machine now and shape the load from it (see the module docstring)."""
    model = _tiny_model()
    _step_s(model, 1)  # warm-up: one-time costs stay out of the timing
    alone = _step_s(model, 1)
    plans = []
    for num_clients in CLIENT_CHOICES:
        plans.append(_shape(num_clients, alone, _step_s(model, num_clients, is_eos_allowed=True)))
        if plans[-1].margin >= MARGIN:
            break
    plan = max(plans, key=lambda p: p.margin)
    print(f"\nload plan: {plan}, margin {plan.margin:.2f}")
    assert plan.margin >= MIN_MARGIN, f"this machine runs {plan.num_clients} streams too close to one: {plan}"
    return plan


@cache
def _tiny_model() -> ChatTTSModel:
    return load_model(ModelSource(load_format="dummy", dummy_size="tiny"), device="cpu", dtype="fp32", quant="none")


@cache
def _kv_bytes_per_token() -> int:
    gpt = _tiny_model().modules.gpt
    return gpt.kv_bytes_per_token(kv_cache_dtype("auto", gpt))


def _step_s(model: ChatTTSModel, num_streams: int, *, is_eos_allowed: bool = False) -> float:
    """Mean seconds of a decode step while ``num_streams`` streams run together, their vocoder work included.

    With ``is_eos_allowed`` the random weights end some streams early, as they do in the load (the batch
    thins out); a stream alone runs its full length.
    """
    config = EngineConfig(max_batch_size=num_streams, max_waiting=num_streams + 1, max_seq_len=MAX_SEQ_LEN,
                          kv_budget_bytes=num_streams * MAX_SEQ_LEN * _kv_bytes_per_token(), vocoder_dtype="fp32",
                          admission="off")  # fmt: skip
    core = EngineCore(model, config)
    code = SamplingParams(max_new_tokens=CALIBRATION_FRAMES, ignore_eos=not is_eos_allowed)
    for i in range(num_streams):
        params = SynthesisParams(code=code, refine_text=False, seed=i)
        core.add_request(str(i), LINES[i % len(LINES)], params, stream=True)
    durations = []
    while core.has_work():
        core.step()
        step = core.last_step
        if step is not None and step.num_prefill == 0 and step.num_decode:  # prefill delays the start, not the pace
            durations.append(step.duration_s)
    return sum(durations) / len(durations)


def _shape(num_clients: int, step_s_alone: float, step_s_together: float) -> LoadPlan:
    """The shortest stream (and its startup buffer) that meets ``MARGIN``, else the widest margin there is."""
    candidates = [
        LoadPlan(num_clients, frames, prebuffer_s, step_s_alone, step_s_together,
                 _max_step_s_without_stall(frames, prebuffer_s), _min_step_s_with_stall(frames, prebuffer_s))
        for frames in FRAME_CHOICES
        for prebuffer_s in PREBUFFER_CHOICES_S
    ]  # fmt: skip
    return next((p for p in candidates if p.margin >= MARGIN), max(candidates, key=lambda p: p.margin))


@cache
def _chunks(num_frames: int) -> tuple[tuple[int, float], ...]:
    """(decode step, seconds of audio out by then) for each chunk one stream sends, by the engine's own schedule."""
    stream = AudioStream("plan", StreamingConfig(), use_decoder=False, is_streaming=True)
    chunks = []
    for step in range(1, num_frames + 1):
        stream.append([0, 0, 0, 0], torch.zeros(0))
        if step == num_frames:
            stream.complete()
        while (window := stream.next_window()) is not None:
            stream.mark_emitted(window)
            chunks.append((step, stream.num_emitted_samples / SAMPLE_RATE_HZ))
    return tuple(chunks)


def _max_stall_s(num_frames: int, prebuffer_s: float, step_s: float) -> float:
    arrivals = [AudioArrival(step * step_s, audio_s) for step, audio_s in _chunks(num_frames)]
    return simulate_playback(arrivals, prebuffer_s).max_stall_s


@cache
def _max_step_s_without_stall(num_frames: int, prebuffer_s: float) -> float:
    return _stall_threshold_s(lambda step_s: _max_stall_s(num_frames, prebuffer_s, step_s) > 0.0)[0]


@cache
def _min_step_s_with_stall(num_frames: int, prebuffer_s: float) -> float:
    return _stall_threshold_s(lambda step_s: _max_stall_s(num_frames, prebuffer_s, step_s) > CONTINUITY_STALL_S)[1]


def _stall_threshold_s(stalls: Callable[[float], bool]) -> tuple[float, float]:
    """Step times just below and at the one where ``stalls`` turns true (it only grows with the step), to 0.1 %.

    Infinite where it never does (a startup buffer that holds the whole stream).
    """
    low, high = 1e-5, 10.0
    if not stalls(high):
        return math.inf, math.inf
    while high / low > 1.001:
        middle = (low * high) ** 0.5
        low, high = (low, middle) if stalls(middle) else (middle, high)
    return low, high


def _as_measured(plan: LoadPlan, url: str) -> str:
    """The plan beside the server's own step times (ms by batch size), for a failure message."""
    step_ms = httpx.get(f"{url}/readyz").json()["details"]["step_ms_by_batch"]
    return f"{plan}; the server's mean step ms by batch: {step_ms}"


def run_loadtest(tmp_path: Path, url: str, name: str, plan: LoadPlan) -> dict[str, Any]:
    warm_up = httpx.post(f"{url}/v1/audio/speech", json={"input": "Warm up.", "response_format": "pcm"}, timeout=120)
    assert warm_up.status_code == 200
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(LINES) + "\n")
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(
        app, ["loadtest", url, *plan.loadtest_args(), "--texts", str(texts), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(out.read_text())
    print(f"\n{name}: rtf {report['rtf']}, statuses {report['status_counts']}, continuity {report['continuity_rate']}, "
          f"max stall {report['stall_s']['max']:.3f} s, TTFA p50 {report['ttfa_s']['p50']}")  # fmt: skip
    return report


def test_realtime_admission_refuses_or_queues_the_extra_streams_and_the_admitted_ones_never_stall(
    tmp_path: Path,
) -> None:
    plan = plan_load()
    overrides: dict[str, Any] = {"admission": "realtime", "realtime_capacity_override": 1,
                                 "max_queue_wait_s": plan.max_queue_wait_s}  # fmt: skip
    with running_server(tmp_path, **plan.server_settings(), **overrides) as (url, _):
        ready = httpx.get(f"{url}/readyz").json()["details"]
        assert ready["admission"] == "realtime" and ready["realtime_capacity_streams"] == 1
        before = samples(url)
        report = run_loadtest(tmp_path, url, "admission_on", plan)
        after = samples(url)
        statuses = report["status_counts"]
        assert set(statuses) <= {"200", "503"} and statuses.get("200", 0) >= 2 and statuses.get("503", 0) >= 1, plan
        errors = dict(report["error_counts"])
        num_empty = errors.pop("no_audio", 0)  # random weights may draw EOS at once: a whole 200 of (next to) no audio
        assert errors == {"overloaded": statuses["503"]}
        assert statuses["200"] - num_empty >= 2, plan
        refused = value(after, "turbotts_admission_rejections_total", reason="realtime") - value(
            before, "turbotts_admission_rejections_total", reason="realtime"
        )
        assert refused == statuses["503"]
        assert value(after, "turbotts_realtime_capacity_streams") == 1
        is_continuous = report["num_streams_with_stall_over_100ms"] == 0 and report["continuity_rate"] == 1.0
        assert is_continuous, _as_measured(plan, url)
        # capacity 1: each admitted stream waited in the queue until the one before it had ended
        spoken = [r for r in report["runs"][0]["requests"] if r["status"] == 200 and r["ttfa_s"] is not None]
        admitted = sorted(spoken, key=lambda r: r["ttfa_s"])
        for before_it, after_it in itertools.pairwise(admitted):
            assert after_it["sent_s"] + after_it["ttfa_s"] >= before_it["sent_s"] + before_it["latency_s"] - 0.05


def test_the_same_load_with_admission_off_stalls(tmp_path: Path) -> None:
    plan = plan_load()
    with running_server(tmp_path, **plan.server_settings(), admission="off", realtime_capacity_override=1) as (url, _):
        assert httpx.get(f"{url}/readyz").json()["details"]["admission"] == "off"
        report = run_loadtest(tmp_path, url, "admission_off", plan)
        assert report["status_counts"] == {"200": plan.num_clients}  # nobody is refused ...
        # ... and listeners wait for audio mid-stream
        assert report["num_streams_with_stall_over_100ms"] > 0, _as_measured(plan, url)
        assert report["continuity_rate"] < 1.0
