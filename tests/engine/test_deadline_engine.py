"""Deadline scheduling through the real engine: a stream FIFO would stall stays gap-free.

The tiny model runs every batch far faster than real time on any CPU, so on its own it never
meets a deadline problem. The engine's clock is therefore virtual: each step advances it by
the step cost of a machine on which one stream runs at twice real time and two at 0.75x (a
full-size model on a 2-core CPU is of that kind), and the policy learns those costs as it would
measure them. Everything else is real: the tiny model decodes, the scheduler picks rows, the
chunks come out of the vocoder, and the listener is the load tester's player with a 1 s buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from tests.golden import FIXTURE_DIR
from turbotts import EngineConfig, SamplingParams, SynthesisParams
from turbotts.bench.loadtest_player import AudioArrival, Playback, simulate_playback
from turbotts.engine.core import EngineCore
from turbotts.model.chattts import ChatTTSModel
from turbotts.sources import ModelSource, load_model

FRAME_S = 512 / 24000  # one code frame of audio: 21.3 ms
#: the replayed machine: one row in half a frame's time, two rows in 4/3 of it (FIFO falls behind)
STEP_S = {1: 0.5 * FRAME_S, 2: 4 / 3 * FRAME_S}
BUFFER_S = 1.0
LONG_FRAMES, SHORT_FRAMES = 700, 300  # 15 s and 6.4 s of audio
SECOND_ARRIVES_S = 3.0


@cache
def model() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR))


@dataclass
class VirtualClock:
    now_s: float = 0.0

    def __call__(self) -> float:
        return self.now_s


def _params(num_frames: int, seed: int) -> SynthesisParams:
    code = SamplingParams(max_new_tokens=num_frames, ignore_eos=True)
    return SynthesisParams(code=code, refine_text=False, seed=seed)


def _listen(scheduling: str) -> dict[str, Playback]:
    """A long stream, then a short one while the first plays; each as its listener hears it."""
    clock = VirtualClock()
    config = EngineConfig(admission="off", scheduling=scheduling, playback_buffer_s=BUFFER_S, max_seq_len=1024)
    core = EngineCore(model(), config, clock=clock)
    policy = core.scheduler.realtime
    assert policy is not None
    for batch, step_s in STEP_S.items():  # what the policy would have measured on that machine
        for _ in range(3):
            policy.observe_step(batch, step_s)
    arrivals: dict[str, list[AudioArrival]] = {"first": [], "second": []}
    sent_s = {"first": 0.0}
    audio_s = {"first": 0.0, "second": 0.0}
    core.add_request("first", "hello world, this is a test.", _params(LONG_FRAMES, 1), stream=True)
    while core.has_work():
        if "second" not in sent_s and clock.now_s >= SECOND_ARRIVES_S:
            sent_s["second"] = clock.now_s
            core.add_request("second", "this is a test", _params(SHORT_FRAMES, 2), stream=True)
        outputs = core.step()
        step = core.last_step
        assert step is not None
        clock.now_s += STEP_S.get(step.num_decode, STEP_S[2]) if step.num_decode else 0.5 * FRAME_S
        for output in outputs:
            audio_s[output.request_id] += output.audio.size / 24000
            time_s = clock.now_s - sent_s[output.request_id]
            arrivals[output.request_id].append(AudioArrival(time_s, audio_s[output.request_id]))
    return {name: simulate_playback(timeline, prebuffer_s=BUFFER_S) for name, timeline in arrivals.items()}


def test_a_stream_that_stalls_under_fifo_stays_gap_free_with_deadlines() -> None:
    fifo = _listen("fifo")
    assert not fifo["second"].is_continuous, fifo  # both rows every step: 0.75x real time for both
    deadline = _listen("deadline")
    assert deadline["first"].is_continuous and deadline["second"].is_continuous, deadline
    started_s = deadline["second"].start_s
    assert started_s is not None and fifo["second"].start_s is not None
    assert started_s < fifo["second"].start_s  # its first second of audio comes sooner too


def test_a_stream_carries_its_listeners_buffer_and_batch_work_none() -> None:
    core = EngineCore(model(), EngineConfig(playback_buffer_s=0.4))
    told = core.add_request("told", "hello", _params(20, 1), stream=True, playback_buffer_s=3.0)
    default = core.add_request("default", "hello", _params(20, 2), stream=True)
    whole = core.add_request("whole", "hello", _params(20, 3), stream=False)
    assert told.sequence.playback is not None and told.sequence.playback.buffer_s == 3.0
    assert default.sequence.playback is not None and default.sequence.playback.buffer_s == 0.4
    assert whole.sequence.playback is None  # nobody plays it as it comes: batch work, no deadline
    while core.has_work():
        core.step()
    assert default.sequence.playback.first_audio_s is not None
    assert default.sequence.playback.emitted_audio_s > 0


def _listen_alone(scheduling: str, speed: float, num_frames: int) -> tuple[Playback, list[int]]:
    """One stream on a machine that makes its frames at ``speed`` x real time: how its listener
    hears it, and the size in frames of each chunk it got."""
    clock = VirtualClock()
    config = EngineConfig(admission="off", scheduling=scheduling, playback_buffer_s=BUFFER_S, max_seq_len=1024)
    core = EngineCore(model(), config, clock=clock)
    arrivals: list[AudioArrival] = []
    chunk_frames: list[int] = []
    audio_s = 0.0
    core.add_request("alone", "hello world, this is a test.", _params(num_frames, 3), stream=True)
    while core.has_work():
        outputs = core.step()
        clock.now_s += FRAME_S / speed
        for output in outputs:
            if output.audio.size:
                audio_s += output.audio.size / 24000
                chunk_frames.append(round(output.audio.size / 512))
                arrivals.append(AudioArrival(clock.now_s, audio_s))
    return simulate_playback(arrivals, prebuffer_s=BUFFER_S), chunk_frames


def test_a_chunk_that_would_land_after_the_player_runs_dry_leaves_early() -> None:
    """At 1.1x real time a planned 96-frame chunk takes 1.86 s to make, longer than the 1.6 s the
    player holds when it starts: the planned chunks stall, a smaller chunk sent in time does not."""
    fifo, fifo_chunks = _listen_alone("fifo", speed=1.1, num_frames=400)
    assert not fifo.is_continuous, fifo
    assert 96 in fifo_chunks  # the planned sizes: 4, 24, 48, 96, ...
    deadline, chunks = _listen_alone("deadline", speed=1.1, num_frames=400)
    assert deadline.is_continuous, (deadline, chunks)
    assert any(12 <= frames < 96 for frames in chunks[3:-1]), chunks  # a late chunk: smaller, on time
    assert sum(chunks) == sum(fifo_chunks)  # the same audio, cut differently
    fast, fast_chunks = _listen_alone("deadline", speed=3.0, num_frames=400)
    assert fast.is_continuous and 96 in fast_chunks  # far ahead of its listener: the planned, larger chunks
