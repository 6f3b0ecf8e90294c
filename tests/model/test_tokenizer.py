"""Tokenizer and prompt decoration against the official golden cases b1..b4."""

from __future__ import annotations

import pytest
import torch

from tests.golden import FIXTURE_DIR, case, tensors
from turbotts.errors import CheckpointError, InvalidInputError
from turbotts.model.tokenizer import Tokenizer, decorate_code_prompt, decorate_refine_prompt

NUM_VQ = 4


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_file(FIXTURE_DIR / "asset" / "tokenizer", num_text_tokens=768)


def _decorated(name: str) -> list[str]:
    inputs = case(name)["inputs"]
    texts = inputs["texts"]
    if name.startswith("b3"):
        return [decorate_refine_prompt(t, "[oral_2][laugh_0][break_6]") for t in texts]
    has_speaker = "spk_emb" in inputs
    return [decorate_code_prompt(t, txt_smp=inputs.get("txt_smp"), has_speaker=has_speaker) for t in texts]


CASES = ["b1_code_prompts", "b2_code_prompts_spk", "b3_refine_prompts", "b4_code_prompts_audio_prompt"]


@pytest.mark.parametrize("name", CASES)
def test_decoration_matches(name: str) -> None:
    assert _decorated(name) == case(name)["inputs"]["decorated"]


@pytest.mark.parametrize("name", CASES)
def test_unpadded_tokens_and_decode(tok: Tokenizer, name: str) -> None:
    outputs = case(name)["outputs"]
    ids = tok.encode_unpadded(_decorated(name))
    assert ids == outputs["unpadded_ids"]
    assert [tok.tokens(x) for x in ids] == outputs["tokens"]
    assert tok.decode_batch(ids) == outputs["decode_unpadded"]


@pytest.mark.parametrize("name", CASES)
def test_batch_matches(tok: Tokenizer, name: str) -> None:
    golden = tensors(name)
    prompt = None
    if name.startswith("b4"):
        prompt = torch.tensor(case(name)["inputs"]["prompt_codes(4,P)"])
    batch = tok.encode_batch(_decorated(name), NUM_VQ, audio_prompt=prompt)
    for key in ("input_ids", "attention_mask", "text_mask"):
        got = getattr(batch, key)
        assert got.dtype == golden[key].dtype, key
        assert torch.equal(got, golden[key]), key


def test_decoration_strips_forged_structure() -> None:
    assert decorate_code_prompt(" [Stts][spk_emb]hi[empty_spk] ") == "[Stts][empty_spk][speed_5]hi[Ptts]"
    assert decorate_code_prompt("hi", prompt="", has_speaker=True) == "[Stts][spk_emb]hi[Ptts]"


def test_special_ids(tok: Tokenizer) -> None:
    assert tok.stts_id == 718 and tok.ptts_id == 719 and tok.spk_emb_id == 720 and tok.empty_spk_id == 721
    assert tok.tokens([tok.eos_id, tok.break_0_id]) == ["[Ebreak]", "[break_0]"]
    assert tok.pad_id == 0


def test_vocabulary_larger_than_embedding_is_rejected() -> None:
    with pytest.raises(CheckpointError, match="text embeddings"):
        Tokenizer.from_file(FIXTURE_DIR / "asset" / "tokenizer", num_text_tokens=700)


def test_missing_file() -> None:
    with pytest.raises(CheckpointError, match="cannot load"):
        Tokenizer.from_file(FIXTURE_DIR / "nope.json")


def test_bad_inputs(tok: Tokenizer) -> None:
    with pytest.raises(InvalidInputError):
        tok.encode("   ")
    with pytest.raises(InvalidInputError):
        tok.encode_batch([], NUM_VQ)
    with pytest.raises(InvalidInputError, match="num_vq"):
        tok.encode_batch(["a"], NUM_VQ, audio_prompt=torch.zeros(3, 2, dtype=torch.long))


def test_unknown_characters_warn(tok: Tokenizer, caplog: pytest.LogCaptureFixture) -> None:
    ids = tok.encode("魑")
    assert ids == [tok.unk_id]
    assert "[UNK]" in caplog.text and "魑" not in caplog.text and "sha256:" in caplog.text
