"""Prometheus metrics of one app, in their own registry (no global state).

Labels are bounded: a route template, a status code, a response format; never
the text, the voice string or the request id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from turbotts.cache.tiered import TieredCacheStats
from turbotts.engine.async_engine import EngineStats


@dataclass(frozen=True)
class GuardStats:
    """Counters the guards keep themselves, read at scrape time."""

    cache: TieredCacheStats
    num_flights_joined: int  # requests that shared another request's synthesis
    num_redis_outages: int


class _GuardCollector(Collector):
    """Exports :class:`GuardStats` (set ``source`` once the guards exist)."""

    def __init__(self) -> None:
        self.source: Callable[[], GuardStats] | None = None

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        if self.source is None:
            return
        stats = self.source()
        lookups = CounterMetricFamily(
            "turbotts_cache_lookups", "Audio cache lookups by level and result.", labels=["level", "result"]
        )
        for level, hits, misses in (
            ("l1", stats.cache.num_l1_hits, stats.cache.num_l1_misses),
            ("l2", stats.cache.num_l2_hits, stats.cache.num_l2_misses),
        ):
            lookups.add_metric([level, "hit"], hits)
            lookups.add_metric([level, "miss"], misses)
        yield lookups
        yield CounterMetricFamily(
            "turbotts_cache_l2_failures",
            "L2 (Redis) calls that failed or were skipped.",
            value=stats.cache.num_l2_failures,
        )
        yield CounterMetricFamily("turbotts_redis_outages", "Redis outages begun.", value=stats.num_redis_outages)
        yield CounterMetricFamily(
            "turbotts_singleflight_joined",
            "Requests that shared a concurrent synthesis.",
            value=stats.num_flights_joined,
        )
        yield GaugeMetricFamily(
            "turbotts_cache_l1_bytes", "Bytes held by the L1 cache.", value=stats.cache.num_l1_bytes
        )
        yield GaugeMetricFamily(
            "turbotts_cache_l1_entries", "Entries in the L1 cache.", value=stats.cache.num_l1_entries
        )


_LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
_RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_duration_s = Histogram(
            "turbotts_request_duration_seconds",
            "Wall time of HTTP requests.",
            ["route", "status"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.ttfa_s = Histogram(
            "turbotts_time_to_first_audio_seconds",
            "Request start to first audio bytes.",
            ["format"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.rtf = Histogram(
            "turbotts_real_time_factor", "Synthesis wall time / audio duration.", buckets=_RTF_BUCKETS, registry=r
        )
        self.audio_s = Counter("turbotts_audio_seconds_total", "Audio produced.", registry=r)
        self.errors = Counter("turbotts_errors_total", "Error responses.", ["status"], registry=r)
        self.in_flight = Gauge("turbotts_requests_in_flight", "Synthesis requests being served.", registry=r)
        self.queue_depth = Gauge("turbotts_queue_depth", "Sequences waiting for a batch slot.", registry=r)
        self.batch_size = Gauge("turbotts_running_batch_size", "Sequences in the last engine step.", registry=r)
        self.running = Gauge("turbotts_running_sequences", "Sequences holding a KV slot.", registry=r)
        self.free_slots = Gauge("turbotts_free_kv_slots", "KV slots free.", registry=r)
        self.engine_steps = Gauge("turbotts_engine_steps", "Engine steps since start.", registry=r)
        self.tokens_per_s = Gauge("turbotts_tokens_per_second", "Decoded tokens per second (5 s window).", registry=r)
        self.segments_in_flight = Gauge(
            "turbotts_segments_in_flight", "Segments started and not yet fully streamed, all requests.", registry=r
        )
        self.segments_in_flight_peak = Gauge(
            "turbotts_segments_in_flight_peak",
            "Most segments one request has had in flight at once since start (bounded by max_segments_in_flight).",
            registry=r,
        )
        self._peak_per_request = 0
        self.engine_requests = Counter(
            "turbotts_engine_requests_total",
            "Segments sent to the engine (cache hits and shared flights are not).",
            registry=r,
        )
        self.rate_limited = Counter(
            "turbotts_rate_limited_total", "Requests refused by a rate limit.", ["scope"], registry=r
        )
        self.admission_rejections = Counter(
            "turbotts_admission_rejections_total", "Requests refused by admission control.", ["reason"], registry=r
        )
        self.realtime_capacity = Gauge(
            "turbotts_realtime_capacity_streams",
            "Streams the engine keeps at or above real time plus margin (learned or overridden).",
            registry=r,
        )
        self.sat_out = Gauge(
            "turbotts_sat_out_sequences",
            "Running streams the last engine step left out: far ahead of their listeners (deadline scheduling).",
            registry=r,
        )
        self._num_refused_realtime = 0  # the engine's count already moved into admission_rejections
        self.degraded = Counter("turbotts_degraded_responses_total", "Fallback-clip answers.", ["mode"], registry=r)
        self.content_filtered = Counter(
            "turbotts_content_filtered_total", "Requests refused by the blocklist.", registry=r
        )
        self.quality_mcd_db = Gauge(
            "turbotts_quality_mcd_db",
            "Mel-cepstral distortion of a baseline sentence against the quality baseline (last measured round).",
            ["sentence"],
            registry=r,
        )
        self.quality_threshold_db = Gauge(
            "turbotts_quality_threshold_db", "Mean MCD above which the quality monitor warns.", registry=r
        )
        self.quality_rounds = Counter(
            "turbotts_quality_rounds_total", "Quality monitor rounds by outcome (measured, skipped, failed).",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.quality_last_measured_s = Gauge(
            "turbotts_quality_last_measured_timestamp_seconds",
            "Unix time of the last measured quality round (before the first: the monitor's start; 0: monitor off).",
            registry=r,
        )  # fmt: skip
        self.cpu_kernels = Gauge(
            "turbotts_cpu_kernel_info", "The C++ CPU kernel build in use (1): its variant, ISA and source "
            "(prebuilt, jit, none).", ["variant", "isa", "source"], registry=r,
        )  # fmt: skip
        self.precision = Gauge(
            "turbotts_precision_info", "The precision modes being served (1).", ["dtype", "quant", "vocoder_dtype"],
            registry=r,
        )  # fmt: skip
        self.precision_gate_s = Gauge(
            "turbotts_precision_gate_seconds", "Start-up seconds the auto precision probe and quality gate took.",
            registry=r,
        )  # fmt: skip
        self.precision_gate = Gauge(
            "turbotts_precision_gate_adopted", "The quality gate's verdict per candidate mode (1 adopted).",
            ["mode"], registry=r,
        )  # fmt: skip
        self.guards = _GuardCollector()
        r.register(self.guards)

    def observe_start(self, kernels: dict[str, str], precision: dict[str, object]) -> None:
        """What start-up chose: the kernel build (``Loaded.report()``) and the modes (``GatedPrecision.report()``)."""
        self.cpu_kernels.labels(kernels["variant"], kernels["isa"], kernels["source"]).set(1)
        self.precision.labels(str(precision["dtype"]), str(precision["quant"]), str(precision["vocoder_dtype"])).set(1)
        self.precision_gate_s.set(float(precision.get("gate_seconds", 0.0)))  # type: ignore[arg-type]
        for verdict in precision.get("gate", []):  # type: ignore[attr-defined]
            self.precision_gate.labels(verdict["mode"]).set(1 if verdict["is_adopted"] else 0)

    def observe_engine(self, stats: EngineStats) -> None:
        self.queue_depth.set(stats.num_waiting)
        self.running.set(stats.num_running)
        self.batch_size.set(stats.last_batch_size)
        self.free_slots.set(stats.num_free_slots)
        self.engine_steps.set(stats.num_steps)
        self.tokens_per_s.set(stats.tokens_per_s)
        self.realtime_capacity.set(stats.realtime_capacity)
        self.sat_out.set(stats.num_sat_out)
        if stats.num_refused_realtime > self._num_refused_realtime:  # the engine counts; the metric follows
            self.admission_rejections.labels("realtime").inc(stats.num_refused_realtime - self._num_refused_realtime)
            self._num_refused_realtime = stats.num_refused_realtime

    def observe_segments_in_flight(self, change: int, num_in_request: int) -> None:
        """A request's look-ahead moved by ``change`` and now holds ``num_in_request`` segments."""
        self.segments_in_flight.inc(change)
        if num_in_request > self._peak_per_request:
            self._peak_per_request = num_in_request
            self.segments_in_flight_peak.set(num_in_request)

    def observe_response(self, route: str, status: int, duration_s: float) -> None:
        self.request_duration_s.labels(route, str(status)).observe(duration_s)
        if status >= 400:
            self.errors.labels(str(status)).inc()

    def render(self, stats: EngineStats | None) -> bytes:
        if stats is not None:
            self.observe_engine(stats)
        return generate_latest(self.registry)
