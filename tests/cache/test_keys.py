from __future__ import annotations

import dataclasses
import json

import pytest

from turbotts.cache.keys import cache_key, canonical_request_json, is_cacheable, normalize_text_for_key, redis_key
from turbotts.errors import InvalidInputError
from turbotts.params import SamplingParams, SynthesisParams, VoiceReference

BASE = SynthesisParams(seed=42)


def key_of(text: str = "Hello world.", params: SynthesisParams = BASE, **kwargs: object) -> str:
    options: dict = {"response_format": "wav", "model_fingerprint": "ckpt-abc", **kwargs}
    return cache_key(text, params, **options)


def test_key_is_a_stable_sha256_hex() -> None:
    key = key_of()
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == key_of()
    assert key == key_of(params=SynthesisParams(seed=42))  # equal params built separately


def test_text_spellings_of_the_same_request_share_a_key() -> None:
    assert key_of("  Hello \n\t world. ") == key_of("Hello world.")
    # "é" composed (NFC) and decomposed (NFD) are the same text
    assert key_of("caf\u00e9") == key_of("cafe\u0301")
    assert normalize_text_for_key("a  b\u3000c") == "a b c"


def test_case_and_punctuation_change_the_key() -> None:
    assert key_of("Hello world.") != key_of("hello world.")
    assert key_of("Hello world.") != key_of("Hello world!")


@pytest.mark.parametrize(
    "changed",
    [
        SynthesisParams(seed=43),
        SynthesisParams(seed=42, voice_seed=7),
        SynthesisParams(seed=42, voice="abc"),
        SynthesisParams(seed=42, prompt="[speed_3]"),
        SynthesisParams(seed=42, refine_prompt="[oral_2]"),
        SynthesisParams(seed=42, refine_text=False),
        SynthesisParams(seed=42, normalize_text=False),
        SynthesisParams(seed=42, use_decoder=False),
        SynthesisParams(seed=42, code=SamplingParams(temperature=0.31)),
        SynthesisParams(seed=42, code=SamplingParams(temperature=(0.3, 0.3, 0.3, 0.4))),
        SynthesisParams(seed=42, code=SamplingParams(top_p=0.71)),
        SynthesisParams(seed=42, code=SamplingParams(top_k=21)),
        SynthesisParams(seed=42, code=SamplingParams(repetition_penalty=1.06)),
        SynthesisParams(seed=42, code=SamplingParams(min_new_tokens=1)),
        SynthesisParams(seed=42, code=SamplingParams(max_new_tokens=2047)),
        SynthesisParams(seed=42, code=SamplingParams(greedy=True)),
        SynthesisParams(seed=42, refine=SamplingParams(temperature=0.5)),
        SynthesisParams(seed=42, reference=VoiceReference("codes", "words")),
    ],
)
def test_every_parameter_changes_the_key(changed: SynthesisParams) -> None:
    assert key_of(params=changed) != key_of()


def test_format_fingerprint_and_extra_change_the_key() -> None:
    assert key_of(response_format="mp3") != key_of()
    assert key_of(model_fingerprint="ckpt-def") != key_of()
    assert key_of(extra={"speed": 1.25}) != key_of()
    assert key_of(extra={"speed": 1.25}) == key_of(extra={"speed": 1.25})


def test_the_format_is_case_blind_and_the_order_of_extra_fields_does_not_matter() -> None:
    assert key_of(response_format="WAV") == key_of(response_format="wav")
    in_one_order, in_another = {"speed": 1.25, "sample_rate_hz": 24000}, {"sample_rate_hz": 24000, "speed": 1.25}
    assert key_of(extra=in_one_order) == key_of(extra=in_another)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_extra_is_refused_rather_than_hashed(value: float) -> None:
    with pytest.raises(ValueError):
        key_of(extra={"speed": value})


# Replicas of two releases share one Redis during a rolling upgrade: a key layout that changes silently makes
# every stored clip a miss. If this fails on purpose (a new layout, a new SynthesisParams field or default),
# bump KEY_SCHEMA_VERSION for a layout change and update both pins.
PINNED_DOCUMENT = (
    '{"extra":{"sample_rate_hz":24000,"speed":1.25},"format":"wav","model":"ckpt-abc","params":{"code":'
    '{"greedy":false,"ignore_eos":false,"max_new_tokens":2048,"min_new_tokens":0,"repetition_penalty":1.05,'
    '"temperature":0.3,"top_k":20,"top_p":0.7},"normalize_text":true,"prompt":"[speed_5]","reference":null,'
    '"refine":{"greedy":false,"ignore_eos":false,"max_new_tokens":384,"min_new_tokens":0,"repetition_penalty":1.0,'
    '"temperature":0.7,"top_k":20,"top_p":0.7},"refine_prompt":"","refine_text":true,"seed":42,"use_decoder":true,'
    '"voice":null,"voice_seed":null},"text":"Caf\u00e9 au lait","v":1}'
)
PINNED_KEY = "af8b27e2b501f08c4c3e9f2577270c9740d46235ee2020ef7b9ead243855cb88"


def test_the_key_layout_is_pinned_across_releases() -> None:
    extra = {"speed": 1.25, "sample_rate_hz": 24000}
    options: dict = {"response_format": "WAV", "model_fingerprint": "ckpt-abc", "extra": extra}
    assert canonical_request_json("Caf\u00e9  au lait", BASE, **options) == PINNED_DOCUMENT
    assert cache_key("Caf\u00e9  au lait", BASE, **options) == PINNED_KEY


def test_canonical_json_holds_every_params_field() -> None:
    """A field added to SynthesisParams later is in the key without touching keys.py."""
    document = json.loads(canonical_request_json("x", BASE, response_format="wav", model_fingerprint="m"))
    assert set(document["params"]) == {f.name for f in dataclasses.fields(SynthesisParams)}
    assert set(document["params"]["code"]) == {f.name for f in dataclasses.fields(SamplingParams)}


def test_a_reference_clip_enters_the_key_as_its_digest_only() -> None:
    reference = VoiceReference("\u4e00\u4e01\u4e02", "the words of the clip")
    params = SynthesisParams(seed=42, reference=reference)
    document = canonical_request_json("x", params, response_format="wav", model_fingerprint="m")
    assert reference.spk_smp not in document and reference.transcript not in document
    assert json.loads(document)["params"]["reference"] == {"sha256": reference.digest}
    other = SynthesisParams(seed=42, reference=VoiceReference(reference.spk_smp, "other words"))
    assert key_of(params=params) != key_of(params=other)


def test_only_seeded_requests_are_cacheable() -> None:
    assert is_cacheable(BASE)
    assert not is_cacheable(SynthesisParams())
    assert not is_cacheable(SynthesisParams(voice_seed=3))  # a fixed voice alone is not deterministic audio
    with pytest.raises(InvalidInputError, match="seed"):
        key_of(params=SynthesisParams())


def test_an_empty_model_fingerprint_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="model_fingerprint"):
        key_of(model_fingerprint="")


def test_redis_key_spreads_by_hash_prefix() -> None:
    key = key_of()
    assert redis_key(key) == f"tts:{key[:2]}:{key}"
    assert redis_key(key, prefix="staging") == f"staging:{key[:2]}:{key}"
