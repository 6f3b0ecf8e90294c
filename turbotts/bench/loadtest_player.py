"""A simulated listener: play a stream back in real time from its arrival times and count the stalls.

Why simulate instead of measuring the gaps between chunks: a gap only hurts when the
listener has run out of audio. A server that sends 2 s of audio and then pauses 1 s
never stalls a player; one that sends 0.2 s chunks 0.3 s apart stalls all the time,
although its gaps are small. So the player starts when the first audio arrives (or,
with a startup buffer, once ``prebuffer_s`` of audio is in), plays at 1x, and stalls
whenever the audio it has is used up before more arrives. After a stall it resumes as
soon as any audio is there (no re-buffering), which is how browsers and most phone
players behave for PCM streams.

Pure: numbers in, numbers out, no clock and no I/O (tests feed it hand-made timelines).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

#: a stall at most this long is inaudible enough not to break continuity (the issue's 100 ms)
CONTINUITY_STALL_S = 0.1


@dataclass(frozen=True)
class AudioArrival:
    """``audio_s`` seconds of audio, in total, were playable ``time_s`` after the request was sent."""

    time_s: float
    audio_s: float


@dataclass(frozen=True)
class Playback:
    """What the simulated listener went through."""

    start_s: float | None  # when playback began (None: no audio ever arrived)
    num_stalls: int
    total_stall_s: float
    max_stall_s: float

    @property
    def is_continuous(self) -> bool:
        """No stall longer than :data:`CONTINUITY_STALL_S`."""
        return self.start_s is not None and self.max_stall_s <= CONTINUITY_STALL_S


def simulate_playback(arrivals: Sequence[AudioArrival], prebuffer_s: float = 0.0) -> Playback:
    """Play the timeline back at 1x and record each stall.

    Args:
        arrivals: cumulative playable audio over time, in arrival order (``audio_s`` never decreasing).
        prebuffer_s: audio the player waits for before it starts (capped at the whole stream's audio).

    Returns:
        The start time and the number, total and longest of the stalls.

    Raises:
        ValueError: times go backwards, audio decreases, or ``prebuffer_s`` is negative.
    """
    if prebuffer_s < 0:
        raise ValueError(f"prebuffer_s must be >= 0, got {prebuffer_s}")
    _check_timeline(arrivals)
    playable = [a for a in arrivals if a.audio_s > 0]
    if not playable:
        return Playback(start_s=None, num_stalls=0, total_stall_s=0.0, max_stall_s=0.0)
    needed_s = min(prebuffer_s, playable[-1].audio_s)
    start = next(i for i, a in enumerate(playable) if a.audio_s >= needed_s)
    clock_s, position_s, available_s = playable[start].time_s, 0.0, playable[start].audio_s
    stalls: list[float] = []
    for arrival in playable[start + 1 :]:
        runs_dry_s = clock_s + (available_s - position_s)
        if runs_dry_s < arrival.time_s:  # the buffer empties before this chunk comes
            stalls.append(arrival.time_s - runs_dry_s)
            position_s = available_s
        else:
            position_s += arrival.time_s - clock_s
        clock_s, available_s = arrival.time_s, arrival.audio_s
    return Playback(
        start_s=playable[start].time_s,
        num_stalls=len(stalls),
        total_stall_s=sum(stalls, 0.0),
        max_stall_s=max(stalls, default=0.0),
    )


def _check_timeline(arrivals: Sequence[AudioArrival]) -> None:
    for before, after in itertools.pairwise(arrivals):
        if after.time_s < before.time_s or after.audio_s < before.audio_s:
            raise ValueError(f"arrivals must be in order with audio never decreasing: {before} then {after}")
