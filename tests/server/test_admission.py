"""Admission control in isolation: a fake clock, no server, no torch."""

from __future__ import annotations

import pytest

from turbotts.errors import InvalidInputError
from turbotts.guard.admission import AdmissionConfig, AdmissionController, PressureSample


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sample(waiting: int = 0, free: int = 10, rss: int = 0, device: int = 0) -> PressureSample:
    return PressureSample(num_waiting=waiting, num_free_slots=free, rss_bytes=rss, device_bytes=device)


def test_pressure_must_be_sustained_and_clears_at_once() -> None:
    clock = Clock()
    admission = AdmissionController(AdmissionConfig(admission_window_s=2.0, admission_max_waiting=5), clock=clock)
    admission.observe(_sample(waiting=9))
    clock.now += 1.9
    admission.observe(_sample(waiting=9))
    assert admission.check().is_admitted  # over for 1.9 s: a blip, not yet pressure
    clock.now += 0.2
    admission.observe(_sample(waiting=9))
    decision = admission.check()
    assert not decision.is_admitted and decision.reason == "queue" and decision.retry_after_s == 2.0
    admission.observe(_sample(waiting=1))  # pressure dropped: recovers on the next sample
    assert admission.check().is_admitted


def test_a_dip_restarts_the_window() -> None:
    clock = Clock()
    admission = AdmissionController(AdmissionConfig(admission_window_s=1.0, admission_max_waiting=5), clock=clock)
    admission.observe(_sample(waiting=9))
    clock.now += 0.8
    admission.observe(_sample(waiting=0))
    clock.now += 0.1
    admission.observe(_sample(waiting=9))
    clock.now += 0.8
    assert admission.check().is_admitted


@pytest.mark.parametrize(
    ("config", "sample", "reason"),
    [
        (AdmissionConfig(admission_window_s=0.5, admission_min_free_slots=2), _sample(free=1), "kv_slots"),
        (AdmissionConfig(admission_window_s=0.5, admission_max_rss_bytes=1000), _sample(rss=2000), "memory"),
        (
            AdmissionConfig(admission_window_s=0.5, admission_max_device_bytes=1000),
            _sample(device=2000),
            "device_memory",
        ),
    ],
)
def test_every_pressure_reason(config: AdmissionConfig, sample: PressureSample, reason: str) -> None:
    clock = Clock()
    admission = AdmissionController(config, clock=clock)
    admission.observe(sample)
    clock.now += 0.5
    assert admission.active_reasons() == (reason,)
    assert admission.check().reason == reason


def test_zero_thresholds_are_off() -> None:
    clock = Clock()
    admission = AdmissionController(AdmissionConfig(admission_window_s=0.0, admission_max_waiting=0), clock=clock)
    admission.observe(_sample(waiting=10**6, free=0, rss=10**15, device=10**15))
    assert admission.check().is_admitted


@pytest.mark.parametrize("mode", ["shed", "fallback", "off"])
def test_slo_breach_degrades_as_configured_then_ages_out(mode: str) -> None:
    clock = Clock()
    config = AdmissionConfig(
        ttfa_slo_s=1.0,
        ttfa_max_slow_ratio=0.05,
        ttfa_window_s=10.0,
        ttfa_min_requests=20,
        degrade_mode=mode,  # type: ignore[arg-type]
    )
    admission = AdmissionController(config, clock=clock)
    for _ in range(19):
        admission.observe_ttfa(5.0)
    assert admission.slow_ratio() is None and admission.check().is_admitted  # too few samples to judge
    for _ in range(80):
        admission.observe_ttfa(0.1)
    assert admission.slow_ratio() == pytest.approx(19 / 99)
    decision = admission.check()
    if mode == "shed":
        assert not decision.is_admitted and decision.reason == "slo"
    elif mode == "fallback":
        assert decision.is_admitted and decision.is_degraded and decision.reason == "slo"
    else:
        assert decision.is_admitted and not decision.is_degraded
    clock.now += 10.5  # the slow samples leave the window
    for _ in range(20):
        admission.observe_ttfa(0.1)
    assert admission.slow_ratio() == 0.0 and admission.check() == admission.check() and admission.check().is_admitted
    assert not admission.check().is_degraded


def test_within_the_slo_share_nothing_happens() -> None:
    admission = AdmissionController(AdmissionConfig(degrade_mode="shed", ttfa_min_requests=20), clock=Clock())
    for index in range(100):
        admission.observe_ttfa(2.0 if index < 5 else 0.2)  # exactly 5 %: not above it
    assert admission.check().is_admitted


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="turn it off"):
        AdmissionConfig(admission_max_waiting=-1)
    with pytest.raises(InvalidInputError, match="ttfa_max_slow_ratio"):
        AdmissionConfig(ttfa_max_slow_ratio=1.5)
