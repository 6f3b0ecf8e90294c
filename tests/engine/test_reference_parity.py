"""Zero-shot voices against the official package: the prompt layout with an audio prompt (case b4)
and the split-text run that encodes piece 0's audio into ``spk_smp`` and conditions every piece on it (case j6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.engine.test_official_parity import official_params, tts
from tests.golden import case, tensors
from turbotts import SynthesisParams, VoiceReference
from turbotts.engine.batch import PrefillItem
from turbotts.errors import InvalidInputError, VoiceError
from turbotts.model.speaker import decode_audio_prompt, encode_audio_prompt

B4 = "b4_code_prompts_audio_prompt"
J6 = "j6_e2e_split_text_single_string"


def _b4_params() -> SynthesisParams:
    inputs = case(B4)["inputs"]
    return dataclasses.replace(
        official_params("f1_infer_code"), reference=VoiceReference(inputs["spk_smp"], inputs["txt_smp"])
    )


def test_b4_spk_smp_string_holds_the_prompt_codes() -> None:
    inputs = case(B4)["inputs"]
    codes = decode_audio_prompt(inputs["spk_smp"])
    assert codes.tolist() == inputs["prompt_codes(4,P)"]
    assert encode_audio_prompt(codes) == inputs["spk_smp"]


def test_b4_engine_prompt_is_the_official_layout() -> None:
    """Text ids of ``[Stts][empty_spk]<txt_smp>[speed_5]<text>[Ptts]``, then the codes; the same embedding."""
    engine = tts().engine
    inputs, golden = case(B4)["inputs"], tensors(B4)
    embedded = tensors("d_embed")["emb_b4"]  # (2, 26, 64): the official embedding of the padded batch
    for row, text in enumerate(inputs["texts"]):
        request = engine.add_request(f"b4-{row}", text, _b4_params())
        seq = request.sequence
        engine.abort(request.request_id)
        assert seq.prompt_ids == case(B4)["outputs"]["unpadded_ids"][row]
        assert seq.prompt_codes == golden["input_ids"][row, -6:].tolist()  # (P, num_vq) after [Ptts]
        item = PrefillItem(seq.seq_id, 0, seq.kind, seq.prompt_ids, None, seq.sampling, 0, seq.prompt_codes)
        ids = torch.tensor([seq.prompt_ids + [0] * len(seq.prompt_codes)])
        emb = engine.runner._embed_audio_prompts(engine.runner.embed.embed_text_ids(ids), [item])[0]
        torch.testing.assert_close(emb, embedded[row, -seq.num_prompt_tokens :], atol=1e-6, rtol=0)
    while engine.has_work():
        engine.step()


def test_j6_piece_zero_audio_gives_the_official_spk_smp_and_codes() -> None:
    """Piece 0 alone -> its audio -> DVAE encoder -> spk_smp; then every piece with spk_smp and txt_smp = piece 0."""
    golden, outputs = tensors(J6), case(J6)["outputs"]
    pieces = outputs["split_texts"]
    params = official_params(J6)
    wav = tts().synthesize(pieces[0], params)[0]
    reference = tts().reference_from_audio(wav, tts().sample_rate_hz, pieces[0])
    assert torch.equal(decode_audio_prompt(reference.spk_smp), golden["spk_smp_codes"])
    assert reference.spk_smp == outputs["spk_smp_set_by_infer"]
    assert reference.transcript == outputs["txt_smp_set_by_infer"]
    results = tts().generate_codes(pieces, dataclasses.replace(params, reference=reference))
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.codes, golden[f"ids_{i}"].numpy())


def test_reference_with_voice_fills_both_slots() -> None:
    """spk_emb and spk_smp together: ``[spk_emb]`` in the prompt and the codes after ``[Ptts]``."""
    voice = tts().random_voice(3)
    request = tts().engine.add_request("both", "hello", dataclasses.replace(_b4_params(), voice=voice))
    tts().engine.abort("both")
    tokenizer = tts().model.tokenizer
    assert request.sequence.prompt_ids[:2] == [tokenizer.stts_id, tokenizer.spk_emb_id]
    assert len(request.sequence.prompt_codes) == 6
    while tts().engine.has_work():
        tts().engine.step()


def test_reference_conditions_the_codes() -> None:
    params = official_params("f4_infer_code_single")
    plain = tts().generate_codes(["你好。"], params)[0].codes
    voiced = tts().generate_codes(["你好。"], dataclasses.replace(params, reference=_b4_params().reference))[0].codes
    assert plain.shape != voiced.shape or not np.array_equal(plain, voiced)


@pytest.mark.parametrize(
    ("spk_smp", "message"),
    [
        ("not base16384", "base16384"),
        (encode_audio_prompt(torch.zeros(3, 5, dtype=torch.int64)), "this model needs"),
        (encode_audio_prompt(torch.full((4, 5), 625, dtype=torch.int64)), "code ids >= 625"),
    ],
)
def test_bad_reference_strings_are_refused_at_add(spk_smp: str, message: str) -> None:
    params = dataclasses.replace(_b4_params(), reference=VoiceReference(spk_smp, "hi"))
    with pytest.raises(VoiceError, match=message):
        tts().engine.add_request("bad", "hello", params)


@pytest.mark.parametrize(("spk_smp", "transcript"), [("", "hi"), ("x", " "), ("x", "a" * 501)])
def test_reference_fields_are_checked(spk_smp: str, transcript: str) -> None:
    with pytest.raises(InvalidInputError):
        VoiceReference(spk_smp, transcript)


def test_long_text_without_a_voice_keeps_the_first_segments_speaker() -> None:
    """The official split-text run (j6): piece 1 is conditioned on piece 0's audio and text, so its greedy
    codes equal the official ones; piece 0 is kept as first generated (the official f4-style first pass)."""
    golden, outputs = tensors(J6), case(J6)["outputs"]
    params = official_params(J6)
    wav = tts().synthesize_long("你好。欢迎使用语音合成。", params, max_segment_chars=10)
    first = tts().synthesize(outputs["split_texts"][0], params)[0]
    reference = tts().reference_from_audio(first, tts().sample_rate_hz, outputs["split_texts"][0])
    assert reference.spk_smp == outputs["spk_smp_set_by_infer"]
    second = tts().generate_codes([outputs["split_texts"][1]], dataclasses.replace(params, reference=reference))[0]
    np.testing.assert_array_equal(second.codes, golden["ids_1"].numpy())
    rest = tts().synthesize(outputs["split_texts"][1], dataclasses.replace(params, reference=reference))[0]
    np.testing.assert_array_equal(wav, np.concatenate([first, rest]))
    uncarried = tts().synthesize(outputs["split_texts"][1], params)[0]
    assert uncarried.shape != rest.shape or not np.allclose(uncarried, rest)


def test_long_text_with_a_voice_is_not_carried() -> None:
    params = dataclasses.replace(official_params(J6), voice=tts().random_voice(5))
    wav = tts().synthesize_long("你好。欢迎使用语音合成。", params, max_segment_chars=10)
    pieces = [tts().synthesize(piece, params)[0] for piece in ("你好。", "欢迎使用语音合成。")]
    np.testing.assert_allclose(wav, np.concatenate(pieces), atol=1e-5, rtol=0)  # segments decode in batches
