"""Speaker vectors against the official golden case c_speaker."""

from __future__ import annotations

import lzma

import pybase16384 as b14
import pytest
import torch

from tests.golden import FIXTURE_DIR, case, fixture_config, tensors
from turbotts.errors import CheckpointError, VoiceError
from turbotts.model.speaker import (
    _LZMA_FILTERS,
    MAX_VOICE_VALUES,
    SpeakerStats,
    apply_speaker,
    decode_audio_prompt,
    decode_voice,
    encode_audio_prompt,
    encode_voice,
    sample_random_voice,
)
from turbotts.model.tokenizer import Tokenizer

HIDDEN = 64


@pytest.fixture(scope="module")
def golden() -> dict[str, torch.Tensor]:
    return tensors("c_speaker")


@pytest.fixture(scope="module")
def stats() -> SpeakerStats:
    return SpeakerStats.from_string(fixture_config()["spk_stat"], HIDDEN)


def test_stats_match_golden(stats: SpeakerStats, golden: dict[str, torch.Tensor]) -> None:
    assert stats.std.dtype == torch.float16
    assert torch.equal(stats.std, golden["spk_std"])
    assert torch.equal(stats.mean, golden["spk_mean"])


def test_official_stats_are_raw_not_lzma() -> None:
    stats = SpeakerStats.official(768)
    assert stats.hidden_size == 768
    assert torch.isfinite(stats.std).all() and (stats.std > 0).all()


def test_stats_wrong_hidden_size(stats: SpeakerStats) -> None:
    with pytest.raises(CheckpointError, match="speaker statistics"):
        SpeakerStats.from_string(fixture_config()["spk_stat"], 768)


def test_random_voice_global_rng_matches_official(stats: SpeakerStats, golden: dict[str, torch.Tensor]) -> None:
    torch.manual_seed(2024)
    voice = sample_random_voice(stats)
    assert voice.dtype == torch.float16
    assert torch.equal(voice, golden["spk_raw_fp16"])


def test_random_voice_seed_and_generator_agree(stats: SpeakerStats, golden: dict[str, torch.Tensor]) -> None:
    assert torch.equal(sample_random_voice(stats, 2024), golden["spk_raw_fp16"])
    gen = torch.Generator().manual_seed(2024)
    assert torch.equal(sample_random_voice(stats, gen), golden["spk_raw_fp16"])


def test_decode_matches_golden(golden: dict[str, torch.Tensor]) -> None:
    voice = decode_voice(case("c_speaker")["inputs"]["spk_emb_string"], HIDDEN)
    assert voice.dtype == torch.float16 and voice.shape == (HIDDEN,)
    assert torch.equal(voice, golden["spk_decoded_fp16"])


def test_encode_decode_round_trip(golden: dict[str, torch.Tensor]) -> None:
    text = encode_voice(golden["spk_raw_fp16"])
    assert torch.equal(decode_voice(text, HIDDEN), golden["spk_raw_fp16"])
    assert encode_voice(golden["spk_decoded_fp16"]) == case("c_speaker")["inputs"]["spk_emb_string"]


def test_apply_matches_golden(golden: dict[str, torch.Tensor]) -> None:
    tok = Tokenizer.from_file(FIXTURE_DIR / "asset" / "tokenizer")
    ids = tensors("b2_code_prompts_spk")["input_ids"]
    voice = decode_voice(case("c_speaker")["inputs"]["spk_emb_string"], HIDDEN)
    out = apply_speaker(golden["emb_before"], ids, tok.spk_emb_id, voice)
    assert out.dtype == torch.float32
    assert torch.equal(out, golden["emb_after"])
    spk_rows = out[ids[..., 0] == tok.spk_emb_id]
    assert torch.equal(spk_rows[0].half(), golden["spk_normalized_fp16"])
    # per-row voices give the same result, and the input is not modified
    out2 = apply_speaker(golden["emb_before"], ids, tok.spk_emb_id, voice.expand(3, -1))
    assert torch.equal(out2, golden["emb_after"])
    assert not torch.equal(golden["emb_before"], golden["emb_after"])


def test_apply_leaves_rows_without_token() -> None:
    emb = torch.randn(2, 4, HIDDEN)
    ids = torch.tensor([[1, 2, 7, 3], [1, 2, 3, 4]])
    out = apply_speaker(emb, ids, 7, torch.ones(HIDDEN, dtype=torch.float16))
    assert torch.equal(out[1], emb[1])
    assert torch.allclose(out[0, 2], torch.full((HIDDEN,), HIDDEN**-0.5), atol=1e-3)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("hello voice", "not a base16384"),
        ("", "not a base16384"),
        ("乀嗷会必裑磄圁什", "LZMA2"),
    ],
)
def test_bad_voice_strings(text: str, match: str) -> None:
    with pytest.raises(VoiceError, match=match):
        decode_voice(text, HIDDEN)


def test_decompression_bomb_is_refused_before_it_expands() -> None:
    """44 K characters that LZMA2 expands to 512 MiB: refused once the output passes the widest voice.

    Made with LZMA2's fast preset (2 s, not 12): the same size on zeros, and a stream of a smaller
    dictionary decodes with the voice format's filters (same lc/lp/pb).
    """
    fast = [{"id": lzma.FILTER_LZMA2, "preset": 0}]
    bomb = b14.encode_to_string(lzma.compress(bytes(512 * 2**20), format=lzma.FORMAT_RAW, filters=fast))
    assert len(bomb) < 100_000  # within the API's voice length limit
    with pytest.raises(VoiceError, match=f"decompresses to more than {2 * MAX_VOICE_VALUES} bytes"):
        decode_voice(bomb, HIDDEN)


def test_truncated_and_concatenated_streams(golden: dict[str, torch.Tensor]) -> None:
    """A cut-off stream is refused; streams one after another decode as ``lzma.decompress`` reads them."""
    half = golden["spk_raw_fp16"][: HIDDEN // 2]
    data = lzma.compress(half.numpy().tobytes(), format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    with pytest.raises(VoiceError, match="ends too early"):
        decode_voice(b14.encode_to_string(data[:-3]), HIDDEN)
    assert torch.equal(decode_voice(b14.encode_to_string(data + data), HIDDEN), torch.cat([half, half]))


def test_voice_for_other_model_size(golden: dict[str, torch.Tensor]) -> None:
    with pytest.raises(VoiceError, match="hidden size is 768"):
        decode_voice(encode_voice(golden["spk_raw_fp16"]), 768)


def test_audio_prompt_string_matches_b4() -> None:
    inputs = case("b4_code_prompts_audio_prompt")["inputs"]
    codes = decode_audio_prompt(inputs["spk_smp"])
    assert codes.tolist() == inputs["prompt_codes(4,P)"]
    assert torch.equal(decode_audio_prompt(encode_audio_prompt(codes)), codes)


def test_stat_string_round_trip(stats: SpeakerStats) -> None:
    from turbotts.model.speaker import encode_stat

    text = encode_stat(stats.std, stats.mean)
    assert text == fixture_config()["spk_stat"]
    again = SpeakerStats.from_string(text, HIDDEN)
    assert torch.equal(again.std, stats.std) and torch.equal(again.mean, stats.mean)


def test_randn_fp16_tail_and_statistics() -> None:
    from turbotts.model.speaker import randn_fp16

    x = randn_fp16(70, torch.Generator().manual_seed(0))
    assert x.shape == (70,) and x.dtype == torch.float16
    big = randn_fp16(64_000, torch.Generator().manual_seed(1)).float()
    assert abs(big.mean().item()) < 0.03 and abs(big.std().item() - 1) < 0.03
