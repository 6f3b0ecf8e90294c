"""Admission control: refuse new work while the server is overloaded, degrade while it is slow.

Why: past its capacity a TTS server does not get slower gracefully. Queues grow,
every request's time to first audio grows with them, memory follows, and in the
end everyone waits and some crash. Refusing a few new requests early (503 with
``Retry-After``, so clients and load balancers back off or go elsewhere) keeps
the accepted ones fast, and work already in flight always finishes.

Two kinds of signal, each judged over time so that a blip changes nothing:

* **Pressure** (:class:`PressureSample`, sampled about ten times a second): the
  waiting queue, the free KV slots, the process's memory (RSS) and, on a GPU,
  device memory. A reason becomes active once every sample of it has been over
  its threshold for ``admission_window_s``; while any reason is active, new requests are
  rejected. It clears on the first sample back under the threshold, so the
  server recovers by itself as soon as the pressure drops.
* **Latency SLO**: the share of recent requests (the last ``ttfa_window_s``)
  whose time to first audio exceeded ``ttfa_slo_s``. Above ``ttfa_max_slow_ratio``
  (with at least ``ttfa_min_requests`` samples, so one slow request cannot trip
  it) the server degrades as configured: ``shed`` rejects new work, ``fallback``
  answers with a canned clip, ``off`` only reports it. Slow samples age out of
  the window, so this clears by itself too.

No torch and no I/O here: the server feeds the samples, and tests inject a clock.
The thresholds carry the names of the server settings they come from
(``turbotts/server/settings.py``), so each has one name from the flag to this module.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from turbotts.errors import InvalidInputError

DegradeMode = Literal["off", "shed", "fallback"]
#: Every reason a request can be refused for (bounded: usable as a metric label). ``realtime`` is not
#: decided here but by the engine's real-time admission (``turbotts.engine.realtime``): a stream that
#: would wait longer than ``max_queue_wait_s`` for a real-time slot; it shares the metric and the 503.
REASONS = ("queue", "kv_slots", "memory", "device_memory", "slo", "realtime")


@dataclass(frozen=True)
class AdmissionConfig:
    """Thresholds; a threshold of 0 turns its check off.

    Args:
        admission_window_s: how long a pressure must last before new work is refused.
        admission_max_waiting: sequences waiting for a batch slot.
        admission_min_free_slots: pressure while fewer KV slots than this are free.
        admission_max_rss_bytes: resident memory of this process.
        admission_max_device_bytes: memory allocated on the accelerator (the server computes it
            from the setting ``admission_max_device_fraction``).
        admission_retry_after_s: what a refused client is told to wait.
        ttfa_slo_s: the time-to-first-audio objective of one request.
        ttfa_max_slow_ratio: the share of requests allowed to miss it.
        ttfa_window_s: how far back the share is computed.
        ttfa_min_requests: fewer samples than this in the window never degrade.
        degrade_mode: what breaking the SLO does: ``off``, ``shed`` or ``fallback``.
    """

    admission_window_s: float = 2.0
    admission_max_waiting: int = 512
    admission_min_free_slots: int = 0
    admission_max_rss_bytes: int = 0
    admission_max_device_bytes: int = 0
    admission_retry_after_s: float = 2.0
    ttfa_slo_s: float = 1.0
    ttfa_max_slow_ratio: float = 0.05
    ttfa_window_s: float = 30.0
    ttfa_min_requests: int = 20
    degrade_mode: DegradeMode = "off"

    def __post_init__(self) -> None:
        thresholds = ("admission_max_waiting", "admission_min_free_slots", "admission_max_rss_bytes")
        for name in ("admission_window_s", *thresholds, "admission_max_device_bytes"):
            if getattr(self, name) < 0:
                raise InvalidInputError(f"{name}={getattr(self, name)} is negative; use 0 to turn it off")
        for name in ("admission_retry_after_s", "ttfa_slo_s", "ttfa_window_s"):
            if getattr(self, name) <= 0:
                raise InvalidInputError(f"{name}={getattr(self, name)} must be positive")
        if not 0 <= self.ttfa_max_slow_ratio < 1:
            raise InvalidInputError(f"ttfa_max_slow_ratio={self.ttfa_max_slow_ratio} must lie in [0, 1)")
        if self.ttfa_min_requests < 1:
            raise InvalidInputError("ttfa_min_requests must be at least 1")
        if self.degrade_mode not in ("off", "shed", "fallback"):
            raise InvalidInputError(f"degrade_mode={self.degrade_mode!r}: use off, shed or fallback")


@dataclass(frozen=True)
class PressureSample:
    """One reading of the server's load."""

    num_waiting: int
    num_free_slots: int
    rss_bytes: int
    device_bytes: int = 0


@dataclass(frozen=True)
class AdmissionDecision:
    """What to do with one new request."""

    is_admitted: bool
    reason: str | None = None  # one of REASONS when refused or degraded
    is_degraded: bool = False  # admitted, but answer with the fallback clip
    retry_after_s: float = 0.0


ADMIT = AdmissionDecision(is_admitted=True)


class AdmissionController:
    """Turns load samples and per-request TTFA into admit / refuse / degrade decisions.

    Not thread-safe: feed and query it from one event loop.
    """

    def __init__(self, config: AdmissionConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._over_since: dict[str, float] = {}  # reason -> time of the first sample over threshold
        self._ttfa: deque[tuple[float, bool]] = deque()  # (time, was slow)
        self._num_slow = 0

    def observe(self, sample: PressureSample) -> None:
        """Record one load sample."""
        now = self._clock()
        c = self.config
        checks = {
            "queue": c.admission_max_waiting > 0 and sample.num_waiting > c.admission_max_waiting,
            "kv_slots": c.admission_min_free_slots > 0 and sample.num_free_slots < c.admission_min_free_slots,
            "memory": c.admission_max_rss_bytes > 0 and sample.rss_bytes > c.admission_max_rss_bytes,
            "device_memory": c.admission_max_device_bytes > 0 and sample.device_bytes > c.admission_max_device_bytes,
        }
        for reason, is_over in checks.items():
            if not is_over:
                self._over_since.pop(reason, None)
            else:
                self._over_since.setdefault(reason, now)

    def observe_ttfa(self, ttfa_s: float) -> None:
        """Record one request's time to first audio."""
        is_slow = ttfa_s > self.config.ttfa_slo_s
        self._ttfa.append((self._clock(), is_slow))
        self._num_slow += is_slow
        self._prune()

    def active_reasons(self) -> tuple[str, ...]:
        """Pressure reasons that have lasted at least ``admission_window_s`` (in :data:`REASONS` order)."""
        now = self._clock()
        return tuple(
            r for r in REASONS if r in self._over_since and now - self._over_since[r] >= self.config.admission_window_s
        )

    def slow_ratio(self) -> float | None:
        """Share of requests in the SLO window that missed the TTFA objective; None below ``ttfa_min_requests``."""
        self._prune()
        if len(self._ttfa) < self.config.ttfa_min_requests:
            return None
        return self._num_slow / len(self._ttfa)

    def is_slo_breached(self) -> bool:
        ratio = self.slow_ratio()
        return ratio is not None and ratio > self.config.ttfa_max_slow_ratio

    def check(self) -> AdmissionDecision:
        """The decision for a request arriving now: pressure refuses first, then the SLO degrades."""
        reasons = self.active_reasons()
        if reasons:
            return AdmissionDecision(False, reasons[0], retry_after_s=self.config.admission_retry_after_s)
        if self.config.degrade_mode != "off" and self.is_slo_breached():
            if self.config.degrade_mode == "shed":
                return AdmissionDecision(False, "slo", retry_after_s=self.config.admission_retry_after_s)
            return AdmissionDecision(True, "slo", is_degraded=True)
        return ADMIT

    def _prune(self) -> None:
        horizon = self._clock() - self.config.ttfa_window_s
        while self._ttfa and self._ttfa[0][0] < horizon:
            _, was_slow = self._ttfa.popleft()
            self._num_slow -= was_slow
