"""Per-request audio bookkeeping: which frames exist, which samples left already,
and which window to decode next (no model calls here, only tensor buffers).

Sample arithmetic: code frame t covers mel frames 2t and 2t+1, and mel frame j
is centred on sample 256*j, so a window of frames [w0, w1) decodes to samples
[512*w0, 512*w1 - 256) of the whole utterance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbotts.config import StreamingConfig

SAMPLES_PER_FRAME = 512
HALF_FRAME = 256


@dataclass(frozen=True)
class DecodeWindow:
    """Frames [start_frame, end_frame) to decode; keep samples [keep_from, keep_to) of the result."""

    request_id: str
    frames: torch.Tensor  # (T, H) hidden states or (T, num_vq) codes
    use_decoder: bool
    keep_from: int
    keep_to: int


class AudioStream:
    """The frames of one utterance and how much of its audio has been emitted."""

    def __init__(self, request_id: str, config: StreamingConfig, *, use_decoder: bool, is_streaming: bool) -> None:
        self.request_id = request_id
        self.config = config
        self.use_decoder = use_decoder
        self.is_streaming = is_streaming
        self._frames: list[torch.Tensor] = []
        self._codes: list[list[int]] = []
        self.num_emitted_samples = 0
        self.num_chunks = 0
        self.is_complete = False

    @property
    def num_frames(self) -> int:
        return len(self._codes)

    @property
    def codes(self) -> list[list[int]]:
        return self._codes

    def append(self, codes: list[int], hidden: torch.Tensor) -> None:
        self._codes.append(codes)
        self._frames.append(hidden if self.use_decoder else torch.tensor(codes))

    def complete(self) -> None:
        self.is_complete = True

    def hidden_states(self) -> torch.Tensor:
        """(T, H) of every frame (Decoder path only)."""
        return torch.stack(self._frames) if self._frames else torch.empty(0)

    def next_window(self, *, is_late: bool = False) -> DecodeWindow | None:
        """The window to decode now, or None when no chunk is due.

        ``is_late``: the listener would run dry before the planned chunk is made, so whatever is
        stable leaves now, if it is at least ``min_late_chunk_frames`` (a smaller chunk, on time).
        """
        emitted_frames = self.num_emitted_samples // SAMPLES_PER_FRAME
        if self.is_complete:
            end_sample = max(SAMPLES_PER_FRAME * self.num_frames - HALF_FRAME, 0)
            if end_sample <= self.num_emitted_samples:
                return None
        else:
            if not self.is_streaming:
                return None
            stable_frames = self.num_frames - self._lookahead_frames()
            due = self._frames_due()
            if is_late and self.num_chunks > 0:
                due = min(due, self.config.min_late_chunk_frames)
            if stable_frames - emitted_frames < due:
                return None
            end_sample = min(SAMPLES_PER_FRAME * stable_frames, SAMPLES_PER_FRAME * self.num_frames - HALF_FRAME)
        start_frame = max(0, emitted_frames - self.config.left_context_frames)
        window = torch.stack(self._frames[start_frame:])  # (T, H) or (T, num_vq)
        offset = SAMPLES_PER_FRAME * start_frame
        return DecodeWindow(
            request_id=self.request_id,
            frames=window,
            use_decoder=self.use_decoder,
            keep_from=self.num_emitted_samples - offset,
            keep_to=end_sample - offset,
        )

    @property
    def num_frames_to_next_chunk(self) -> int:
        """Code frames still to make before the next chunk is due (0 when it is due now)."""
        emitted_frames = self.num_emitted_samples // SAMPLES_PER_FRAME
        stable_frames = self.num_frames - self._lookahead_frames()
        return max(self._frames_due() - (stable_frames - emitted_frames), 0)

    @property
    def num_frames_to_late_chunk(self) -> int:
        """Code frames still to make before a late chunk (``next_window(is_late=True)``) could leave."""
        if self.num_chunks == 0:
            return self.num_frames_to_next_chunk
        emitted_frames = self.num_emitted_samples // SAMPLES_PER_FRAME
        stable_frames = self.num_frames - self._lookahead_frames()
        due = min(self._frames_due(), self.config.min_late_chunk_frames)
        return max(due - (stable_frames - emitted_frames), 0)

    def _lookahead_frames(self) -> int:
        """The first chunk holds back less, for a lower time to first audio (see StreamingConfig)."""
        if self.num_chunks == 0:
            return self.config.first_chunk_lookahead_frames
        return self.config.lookahead_frames

    def _frames_due(self) -> int:
        """First chunk, then chunk_frames doubling up to max_chunk_frames."""
        if self.num_chunks == 0:
            return self.config.first_chunk_frames
        grown = self.config.chunk_frames * 2 ** (self.num_chunks - 1)
        return min(grown, self.config.max_chunk_frames)

    def mark_emitted(self, window: DecodeWindow) -> None:
        self.num_emitted_samples += window.keep_to - window.keep_from
        self.num_chunks += 1
