"""Late chunks on this machine's own clock: a stream FIFO's planned chunk stalls plays through.

The virtual-clock tests (test_deadline_engine.py) replay a stated machine. This one is
calibrated to the machine it runs on: it first measures how many times real time the tiny model
streams here (``speed``), then plans chunks that this speed cannot fill in time: a first chunk
the player starts on, four times longer than a late chunk takes to make, then a planned chunk
that takes four times longer to make than the first one lasts. FIFO waits for that chunk and the
listener hears a gap; deadline scheduling sends what is made once the player nears the end of its
audio. Both run the real engine, model and vocoder on the wall clock, alone on the machine
(``serial``); the margins are four-fold either way, so a noisy minute moves neither verdict.
"""

from __future__ import annotations

import math
import time

from tests.engine.test_deadline_engine import model
from turbotts import EngineConfig, SamplingParams, SynthesisParams
from turbotts.bench.loadtest_player import AudioArrival, Playback, simulate_playback
from turbotts.config import StreamingConfig
from turbotts.engine.core import EngineCore

FRAME_S = 512 / 24000
BUFFER_S = 0.05  # the player starts on the first chunk
MAX_SEQ_LEN = 4096
#: frames a late chunk waits on past the first chunk: its minimum plus the lookahead it holds back
FRAMES_TO_LATE_CHUNK = StreamingConfig().min_late_chunk_frames + StreamingConfig().lookahead_frames


def _stream(scheduling: str, streaming: StreamingConfig, num_frames: int) -> tuple[Playback, float]:
    """One stream on the wall clock: how its listener hears it, and its speed (x real time)."""
    config = EngineConfig(
        admission="off", scheduling=scheduling, playback_buffer_s=BUFFER_S, streaming=streaming, max_seq_len=MAX_SEQ_LEN
    )
    core = EngineCore(model(), config)
    code = SamplingParams(max_new_tokens=num_frames, ignore_eos=True)
    params = SynthesisParams(code=code, refine_text=False, seed=5)
    start = time.perf_counter()
    core.add_request("listener", "hello world, this is a test.", params, stream=True)
    arrivals: list[AudioArrival] = []
    audio_s = 0.0
    while core.has_work():
        for output in core.step():
            if output.audio.size:
                audio_s += output.audio.size / 24000
                arrivals.append(AudioArrival(time.perf_counter() - start, audio_s))
    return simulate_playback(arrivals, prebuffer_s=BUFFER_S), audio_s / (time.perf_counter() - start)


def test_a_listener_fifo_would_starve_on_this_machine_plays_through_with_late_chunks() -> None:
    _stream("fifo", StreamingConfig(), 40)  # warm-up: the vocoder's first shapes
    _, speed = _stream("fifo", StreamingConfig(), 200)  # the calibration: this machine's pace, planned chunks
    assert speed >= 1.5, f"the tiny model streams at only {speed:.2f}x real time here: too slow to tell chunkings apart"
    first = math.ceil(4 * FRAMES_TO_LATE_CHUNK / speed)  # lasts 4x what a late chunk takes to make
    big = math.ceil(4 * first * speed)  # takes 4x longer to make than the first chunk lasts
    assert first + big + 200 < MAX_SEQ_LEN, f"the tiny model streams at {speed:.0f}x here: more than this test plans"
    streaming = StreamingConfig(first_chunk_frames=first, chunk_frames=big, max_chunk_frames=big)
    fifo, _ = _stream("fifo", streaming, first + big + 40)
    assert not fifo.is_continuous, (speed, first, big, fifo)
    deadline, _ = _stream("deadline", streaming, first + big + 40)
    assert deadline.is_continuous, (speed, first, big, deadline)
