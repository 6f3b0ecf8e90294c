"""The routing key, the rendezvous hash and the fleet metrics merge (no cluster needed; Ray imported in the test)."""

from __future__ import annotations

import json
from collections import Counter

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.parser import text_string_to_metric_families

from turbotts.scaleout.routing import SPEECH_PATH, rendezvous, routing_key


def _key(**fields: object) -> str | None:
    return routing_key(SPEECH_PATH, json.dumps({"input": "Hello there. And more.", **fields}).encode(), 120)


def test_the_key_is_voice_seed_and_first_segment() -> None:
    assert _key(seed=1, voice="alloy") == _key(seed=1, voice="alloy", response_format="mp3")
    assert _key(seed=1, voice="alloy") != _key(seed=2, voice="alloy")
    assert _key(seed=1, voice="alloy") != _key(seed=1, voice="echo")
    long_a = routing_key(SPEECH_PATH, json.dumps({"input": "Same start. " + "a " * 200, "seed": 1}).encode(), 20)
    long_b = routing_key(SPEECH_PATH, json.dumps({"input": "Same start. " + "b " * 200, "seed": 1}).encode(), 20)
    assert long_a is not None and long_a == long_b  # only the first segment counts


def test_requests_without_a_seed_or_not_speech_have_no_key() -> None:
    assert _key(voice="alloy") is None
    assert routing_key("/v1/voices", b'{"seed": 1, "input": "x"}', 120) is None
    assert routing_key(SPEECH_PATH, b"not json", 120) is None
    assert routing_key(SPEECH_PATH, b'["a list"]', 120) is None


def test_rendezvous_moves_only_the_keys_of_a_replica_that_left() -> None:
    replicas = ["r1", "r2", "r3"]
    keys = [f"key {i}" for i in range(300)]
    before = {key: rendezvous(key, replicas)[0] for key in keys}
    assert set(Counter(before.values())) == set(replicas)  # spread over all
    after = {key: rendezvous(key, ["r1", "r3"])[0] for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved and all(before[key] == "r2" for key in moved)
    assert all(after[key] == rendezvous(key, replicas)[1] for key in moved)  # to their second choice


def _exposition(value: float) -> str:
    registry = CollectorRegistry()
    PromCounter("demo_audio_seconds", "Audio.", registry=registry).inc(value)
    Histogram("demo_ttfa_seconds", "TTFA.", ["format"], buckets=(0.1, 1.0), registry=registry).labels("wav").observe(
        value
    )
    return generate_latest(registry).decode()


def test_merged_metrics_parse_and_carry_a_replica_label() -> None:
    from turbotts.scaleout.fleet_metrics import merge  # imports ray

    text = merge({"a": _exposition(0.5), "b": _exposition(2.0)})
    families = {family.name: family for family in text_string_to_metric_families(text)}
    audio = families["demo_audio_seconds"].samples
    totals = {s.labels["replica"]: s.value for s in audio if s.name == "demo_audio_seconds_total"}
    assert totals == {"a": 0.5, "b": 2.0}
    counts = [s for s in families["demo_ttfa_seconds"].samples if s.name == "demo_ttfa_seconds_count"]
    assert {(s.labels["replica"], s.labels["format"], s.value) for s in counts} == {
        ("a", "wav", 1.0),
        ("b", "wav", 1.0),
    }
    assert text.count("# TYPE demo_ttfa_seconds histogram") == 1
