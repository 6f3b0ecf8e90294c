"""End-to-end parity with the official package on the tiny checkpoint: greedy
codes exactly, hidden states and waveforms within float tolerance."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

from tests.golden import FIXTURE_DIR, case, tensors
from turbotts import TTS, ModelSource, SamplingParams, SynthesisParams

HIDDEN_TOL = 1e-4
WAV_TOL = 1e-4


@cache
def tts() -> TTS:
    return TTS.load(ModelSource(checkpoint=FIXTURE_DIR))


def official_params(name: str, *, refine: bool = False) -> SynthesisParams:
    """The greedy settings of a golden case (temperature 1e-6 in the official call is argmax)."""
    raw = case(name)["params"]
    p = raw.get("params_infer_code(before call)", raw)
    code = SamplingParams(
        top_p=p["top_P"],
        top_k=p["top_K"],
        repetition_penalty=p["repetition_penalty"],
        max_new_tokens=p["max_new_token"],
        min_new_tokens=p["min_new_token"],
        greedy=True,
    )
    refine_params = SamplingParams(top_p=0.7, top_k=20, repetition_penalty=1.0, max_new_tokens=24, greedy=True)
    refine_prompt = ""
    if refine:
        r = raw["params_refine_text"]
        refine_params = SamplingParams(
            top_p=r["top_P"],
            top_k=r["top_K"],
            repetition_penalty=r["repetition_penalty"],
            max_new_tokens=r["max_new_token"],
            greedy=True,
        )
        refine_prompt = r["prompt"]
    return SynthesisParams(
        code=code,
        refine=refine_params,
        voice=p["spk_emb"],
        prompt=p["prompt"],
        seed=p["manual_seed"],
        refine_text=refine,
        refine_prompt=refine_prompt,
        normalize_text=False,
    )


@pytest.mark.parametrize(
    "name", ["f1_infer_code", "f2_infer_code_spk", "f3_infer_code_min_new_token", "f4_infer_code_single"]
)
def test_greedy_codes_and_hiddens(name: str) -> None:
    golden = tensors(name)
    texts = case(name)["inputs"]["texts"]
    results = tts().generate_codes(texts, official_params(name))
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.codes, golden[f"ids_{i}"].numpy())
        assert result.hidden is not None
        np.testing.assert_allclose(result.hidden, golden[f"hiddens_{i}"].numpy(), rtol=0, atol=HIDDEN_TOL)
        finished_by_eos = case(name)["outputs"]["per_text"][i]["finished_by_eos"]
        assert result.finish_reason == ("stop" if finished_by_eos else "length")


def test_refine_text_matches_official_ids() -> None:
    golden = tensors("g1_refine_text")
    texts = case("g1_refine_text")["inputs"]["texts"]
    params = official_params("j4_e2e_with_refine", refine=True)
    results = tts().generate_codes(texts, params)
    tokenizer = tts().model.tokenizer
    for i, result in enumerate(results):
        assert result.refined_text == tokenizer.decode(golden[f"ids_filtered_{i}"].tolist())
    assert [r.refined_text for r in results] == case("g1_refine_text")["outputs"]["decoded_filtered_text"]


@pytest.mark.parametrize(
    ("name", "use_decoder"),
    [("j1_e2e_decoder", True), ("j2_e2e_dvae", False), ("j3_e2e_decoder_spk", True), ("j4_e2e_with_refine", True)],
)
def test_end_to_end_waveform(name: str, use_decoder: bool) -> None:
    golden = tensors(name)
    texts = case(name)["inputs"]["texts"]
    params = official_params(name, refine=name.startswith("j4"))
    params = SynthesisParams(**{**params.__dict__, "use_decoder": use_decoder})
    wavs = tts().synthesize(texts, params)
    codes = tts().generate_codes(texts, params)
    for i, wav in enumerate(wavs):
        np.testing.assert_array_equal(codes[i].codes, golden[f"ids_{i}"].numpy())
        num_frames = golden[f"ids_{i}"].shape[0]
        assert wav.dtype == np.float32 and len(wav) == 512 * num_frames - 256
    # The official pads shorter utterances with zero codes and decodes the batch
    # together; the longest one has no padding, so it must match sample for sample.
    longest = int(np.argmax([len(w) for w in wavs]))
    unstripped = golden["wavs_unstripped"][longest].numpy()
    np.testing.assert_allclose(wavs[longest], unstripped[: len(wavs[longest])], rtol=0, atol=WAV_TOL)


def test_short_utterance_matches_its_own_official_decode() -> None:
    """Decoded alone (no padding from the batch), the 3-frame utterance equals the
    official single-utterance decode of case i."""
    golden = tensors("i_vocos_decode")
    params = official_params("j1_e2e_decoder")
    wav = tts().synthesize(["hello world, this is a test."], params)[0]
    np.testing.assert_allclose(wav, golden["wav_from_decoder_mel_single_1"][0].numpy(), rtol=0, atol=WAV_TOL)


def test_audio_is_not_trimmed() -> None:
    """The official infer deletes every sample below 1e-5 anywhere; we keep them all."""
    params = official_params("j1_e2e_decoder")
    wav = tts().synthesize(["你好，欢迎使用语音合成。"], params)[0]
    assert len(wav) == 512 * 40 - 256
    assert int((np.abs(wav) <= 1e-5).sum()) >= 1
    assert torch.isfinite(torch.from_numpy(wav)).all()
