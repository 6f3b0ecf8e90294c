"""Post-processing of synthesized audio: OpenAI ``speed``, and joining the segments of a long text.

Everything here works on float32 mono arrays and has a streaming form, because the
server applies it to chunks as the engine produces them:

- :func:`split_speed` splits an OpenAI ``speed`` between ChatTTS's ``[speed_N]`` prompt
  token and a residual :func:`time_stretch` (ffmpeg ``atempo``: tempo changes, pitch stays).
- :func:`crossfade` and :class:`SegmentJoiner` blend consecutive segments so sentence
  boundaries do not click.
"""

from __future__ import annotations

import math
from fractions import Fraction

import av
import av.filter
import numpy as np

from turbotts.errors import InvalidInputError, TurboTTSError

MIN_SPEED = 0.25
MAX_SPEED = 4.0
_ATEMPO_MIN, _ATEMPO_MAX = 0.5, 2.0  # range where one atempo stage sounds best
_FRAME_SAMPLES = 1024  # frames pushed into atempo; bounds its output lag
_FLUSH_PADDING_FRAMES = 4  # silence that carries atempo's last window out at flush

# ChatTTS [speed_N]: N in 0..9, 5 is the model's normal pace. Our estimate of the pace
# one step buys (the model only nudges its pace, and not precisely).
SPEED_TOKEN_NORMAL = 5
SPEED_TOKEN_MAX = 9
SPEED_TOKEN_STEP = 1.05


def split_speed(speed: float, *, use_prompt: bool = True) -> tuple[int | None, float]:
    """Map an OpenAI ``speed`` to a ChatTTS ``[speed_N]`` token and a residual time-stretch rate.

    We assume each step of the token changes pace by a factor of about 1.05, so
    ``[speed_N]`` speaks at ``1.05 ** (N - 5)`` times normal: ``[speed_0]`` about 0.78x,
    ``[speed_9]`` about 1.22x. ``N = clamp(round(log(speed) / log(1.05)) + 5, 0, 9)``,
    and the residual ``rate = speed / 1.05 ** (N - 5)`` is applied with
    :func:`time_stretch`. So speeds of roughly 0.8..1.25 are (nearly) all prompt, with
    the stretch only correcting within half a step (±2.5 %), and beyond that range the
    token saturates and the stretch does the rest. Examples:

    ========  ==========  ================
    speed     token       residual rate
    ========  ==========  ================
    0.25      [speed_0]   0.319
    0.5       [speed_0]   0.638
    0.8       [speed_0]   1.021
    0.9       [speed_3]   0.992
    1.0       [speed_5]   1.0 (no stretch)
    1.1       [speed_7]   0.998
    1.25      [speed_9]   1.028
    2.0       [speed_9]   1.645
    4.0       [speed_9]   3.291
    ========  ==========  ================

    Letting the model speak faster or slower sounds more natural than stretching, but
    the token's real effect varies by voice, so the result is only approximately
    ``speed``; with ``use_prompt=False`` the prompt is left alone (``None``) and the
    stretch does all of it, which makes the duration exact.

    Args:
        speed: OpenAI speed, 0.25..4.0.
        use_prompt: whether to use the ``[speed_N]`` token at all.

    Returns:
        ``(N, rate)``: the token index (``None`` for "do not change the prompt") and the
        rate for :func:`time_stretch` (1.0 means none is needed).

    Raises:
        InvalidInputError: speed outside 0.25..4.0.
    """
    _check_rate(speed, "speed")
    if not use_prompt:
        return None, float(speed)
    steps = round(math.log(speed) / math.log(SPEED_TOKEN_STEP))
    token = min(max(SPEED_TOKEN_NORMAL + steps, 0), SPEED_TOKEN_MAX)
    rate = speed / SPEED_TOKEN_STEP ** (token - SPEED_TOKEN_NORMAL)
    return token, 1.0 if math.isclose(rate, 1.0, abs_tol=1e-9) else rate


def _check_rate(rate: float, name: str) -> None:
    if not (MIN_SPEED <= rate <= MAX_SPEED):  # also rejects NaN
        raise InvalidInputError(f"{name} must be between {MIN_SPEED} and {MAX_SPEED}, got {rate}")


def _atempo_stages(rate: float) -> list[float]:
    """Split ``rate`` into equal atempo stages that each stay within [0.5, 2.0]."""
    num_stages = 1
    while not (_ATEMPO_MIN <= rate ** (1 / num_stages) <= _ATEMPO_MAX):
        num_stages += 1
    return [rate ** (1 / num_stages)] * num_stages


class StreamTimeStretcher:
    """Pitch-preserving tempo change of a stream (rate 2.0 = twice as fast, half as long).

    Output lags input by atempo's analysis window (tens of ms); :meth:`flush` returns the
    rest and trims or pads so the total output is ``round(total_in / rate)`` samples.
    """

    def __init__(self, rate: float, sample_rate_hz: int = 24000) -> None:
        """Raises InvalidInputError when ``rate`` is outside 0.25..4.0."""
        _check_rate(rate, "rate")
        self.rate = float(rate)
        self._sample_rate_hz = sample_rate_hz
        self._num_in = 0
        self._num_out = 0
        self._num_pushed = 0  # input plus flush padding, for timestamps
        self._graph = None if rate == 1.0 else self._build_graph()

    def _build_graph(self) -> av.filter.Graph:
        graph = av.filter.Graph()
        node = graph.add_abuffer(
            format="flt", sample_rate=self._sample_rate_hz, layout="mono", time_base=Fraction(1, self._sample_rate_hz)
        )
        for stage_rate in _atempo_stages(self.rate):
            stage = graph.add("atempo", f"{stage_rate:.6f}")
            node.link_to(stage)
            node = stage
        node.link_to(graph.add("abuffersink"))
        graph.configure()
        return graph

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Stretch one chunk; returns whatever output is ready (maybe empty)."""
        samples = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if self.rate == 1.0:
            self._count(samples.size, samples.size)
            return samples.copy()
        if self._graph is None:
            raise TurboTTSError("this StreamTimeStretcher was flushed; create a new one for each stream")
        # atempo emits an output frame only once it is full, and sizes it from the input
        # frame: small frames keep the output from lagging a whole chunk behind.
        for start in range(0, samples.size, _FRAME_SAMPLES):
            self._push(self._graph, samples[start : start + _FRAME_SAMPLES])
        out = self._pull(self._graph)
        self._count(samples.size, out.size)
        return out

    def flush(self) -> np.ndarray:
        """End the stream and return the remaining output, trimmed to the expected total length.

        atempo drops part of its last analysis window at end of stream, so silence is
        pushed first to carry the real tail out; the excess is trimmed away.
        """
        if self._graph is None:
            return np.zeros(0, dtype=np.float32)
        num_left = max(round(self._num_in / self.rate) - self._num_out, 0)
        padding = np.zeros(_FRAME_SAMPLES, dtype=np.float32)
        for _ in range(_FLUSH_PADDING_FRAMES):
            self._push(self._graph, padding)
        self._graph.push(None)
        tail = self._pull(self._graph)
        self._graph = None
        if tail.size < num_left:
            tail = np.concatenate([tail, np.zeros(num_left - tail.size, dtype=np.float32)])
        self._num_out += num_left
        return tail[:num_left]

    def _push(self, graph: av.filter.Graph, samples: np.ndarray) -> None:
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")  # (1, T)
        frame.sample_rate = self._sample_rate_hz
        frame.time_base = Fraction(1, self._sample_rate_hz)
        frame.pts = self._num_pushed
        self._num_pushed += samples.size
        graph.push(frame)

    def _count(self, num_in: int, num_out: int) -> None:
        self._num_in += num_in
        self._num_out += num_out

    @staticmethod
    def _pull(graph: av.filter.Graph) -> np.ndarray:
        parts = []
        while True:
            try:
                parts.append(graph.pull().to_ndarray().reshape(-1))
            except (av.BlockingIOError, av.EOFError):
                break
        return np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, dtype=np.float32)


def time_stretch(pcm: np.ndarray, rate: float, sample_rate_hz: int = 24000) -> np.ndarray:
    """Change tempo by ``rate`` (0.25..4.0) keeping pitch; the result has ``round(len / rate)`` samples.

    Uses ffmpeg's ``atempo``; rates outside [0.5, 2.0] run as two equal stages, which
    sounds better than one extreme stage.

    Raises:
        InvalidInputError: rate outside 0.25..4.0.
    """
    stretcher = StreamTimeStretcher(rate, sample_rate_hz)
    return np.concatenate([stretcher.process(pcm), stretcher.flush()])


def crossfade(a_tail: np.ndarray, b_head: np.ndarray) -> np.ndarray:
    """Equal-power crossfade of two equally long pieces: ``a·cos + b·sin`` over a quarter period.

    Equal power (not linear) because consecutive speech segments are uncorrelated:
    a linear fade would dip by up to 3 dB in the middle of the overlap.

    Raises:
        InvalidInputError: the pieces differ in length.
    """
    a = np.asarray(a_tail, dtype=np.float32).reshape(-1)
    b = np.asarray(b_head, dtype=np.float32).reshape(-1)
    if a.size != b.size:
        raise InvalidInputError(f"crossfade needs equal lengths, got {a.size} and {b.size} samples; trim one first")
    phase = (np.arange(a.size, dtype=np.float32) + 0.5) * (np.float32(np.pi / 2) / max(a.size, 1))
    return a * np.cos(phase) + b * np.sin(phase)


class SegmentJoiner:
    """Join the audio of consecutive segments into one stream, crossfading at each boundary.

    The last ``crossfade_ms`` of the stream is always held back (the current segment
    may end there), and the next segment's first ``crossfade_ms`` are blended onto it
    with :func:`crossfade`. Each boundary overlaps ``k = min(n, held, len(next
    segment))`` samples, with ``n = crossfade_ms`` worth of samples (``held`` is short
    only if everything so far is shorter than ``n``), so the total output is
    ``sum(len(segment)) - sum(k)``: for segments longer than the crossfade,
    ``(num_segments - 1) * n`` samples shorter than the plain concatenation.

    Usage: ``add(chunk)`` for each chunk of the current segment, ``end_segment()``
    when it is complete, and ``finish()`` after the last one; all return the samples
    that are final.

    For captions, ``segment_start`` is where the current segment's first sample
    lands in the joined stream (the start of its crossfade), known once that sample
    is placed; ``num_started`` counts the segments placed so far (a segment with no
    audio is never placed).
    """

    def __init__(self, crossfade_ms: float = 20.0, sample_rate_hz: int = 24000) -> None:
        """Raises InvalidInputError for a negative crossfade."""
        if crossfade_ms < 0:
            raise InvalidInputError(f"crossfade_ms must be >= 0, got {crossfade_ms}")
        self._num_fade = round(crossfade_ms * sample_rate_hz / 1000)
        self._held = np.zeros(0, dtype=np.float32)  # end of the stream, not yet returned
        self._head = np.zeros(0, dtype=np.float32)  # start of the segment, waiting to be blended
        self._is_blending = False  # a boundary is open: the current segment's head is not blended yet
        self._num_emitted = 0
        self._is_placed = False  # the current segment's first sample has a position
        self.segment_start = 0
        self.num_started = 0

    def add(self, chunk: np.ndarray) -> np.ndarray:
        """Append a chunk of the current segment; return the samples that can be sent."""
        samples = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return samples
        if not self._is_blending and not self._is_placed:
            self._place(self._num_emitted + self._held.size)
        if self._is_blending:
            self._head = np.concatenate([self._head, samples])
            if self._head.size < self._held.size:
                return np.zeros(0, dtype=np.float32)
            self._blend()
        else:
            self._held = np.concatenate([self._held, samples])
        return self._emit(keep=self._num_fade)

    def end_segment(self) -> np.ndarray:
        """Close the current segment: its tail is held back for the next segment's head."""
        out = np.zeros(0, dtype=np.float32)
        if self._is_blending:
            self._blend()
            out = self._emit(keep=self._num_fade)
        self._is_blending = self._num_fade > 0 and self._held.size > 0
        self._is_placed = False
        return out

    def finish(self) -> np.ndarray:
        """Return everything still held; the joiner is empty afterwards."""
        if self._is_blending:
            self._blend()
        self._is_blending = False
        return self._emit(keep=0)

    def _blend(self) -> None:
        """Overlap the held tail with the head of the new segment."""
        k = min(self._held.size, self._head.size)
        if self._head.size:
            self._place(self._num_emitted + self._held.size - k)
        fade = crossfade(self._held[self._held.size - k :], self._head[:k])
        self._held = np.concatenate([self._held[: self._held.size - k], fade, self._head[k:]])
        self._head = np.zeros(0, dtype=np.float32)
        self._is_blending = False

    def _place(self, position: int) -> None:
        self.segment_start = position
        self._is_placed = True
        self.num_started += 1

    def _emit(self, keep: int) -> np.ndarray:
        cut = max(self._held.size - keep, 0)
        out, self._held = self._held[:cut], self._held[cut:]
        self._num_emitted += out.size
        return out
