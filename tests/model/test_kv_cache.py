"""Prefill + decode through the KV cache reproduce the dense pass (what the engine relies on)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.golden import FIXTURE_DIR, fixture_config, tensors
from turbotts.config import GPTConfig, model_config_from_dict
from turbotts.errors import EngineError
from turbotts.model.attention import Attention
from turbotts.model.attention_metadata import DecodeMetadata, DecodeStrategy, DenseMetadata, PrefillMetadata
from turbotts.model.embed import Embed, fold_weight_norm
from turbotts.model.gpt import GPT, kv_bytes_per_token
from turbotts.model.kv_cache import KVCache
from turbotts.model.layers import RotaryEmbedding, rotate_half

ASSET = FIXTURE_DIR / "asset"
ATOL = 1e-5
PROMPT_LEN = 16
STRATEGIES = [DecodeStrategy.PER_SLOT, DecodeStrategy.GATHER, DecodeStrategy.SLOT_RANGE, DecodeStrategy.AUTO]


def tiny_config() -> GPTConfig:
    gpt_json = json.loads((ASSET / "gpt" / "config.json").read_text())
    return model_config_from_dict(fixture_config(), gpt_json).gpt


@pytest.fixture(scope="module", params=[False, True], ids=["unfused", "fused"])
def gpt(request: pytest.FixtureRequest) -> GPT:
    model = GPT(tiny_config())
    model.load_state_dict(load_file(str(ASSET / "gpt" / "model.safetensors")), strict=True)
    model.eval()
    return model.fuse() if request.param else model


@pytest.fixture(scope="module")
def embed() -> Embed:
    module = Embed(tiny_config())
    module.load_state_dict(fold_weight_norm(load_file(str(ASSET / "Embed.safetensors"))), strict=True)
    return module.eval()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_prefill_then_decode_matches_golden_teacher_forcing(gpt: GPT, embed: Embed, strategy: DecodeStrategy) -> None:
    case = tensors("e1_gpt_teacher_forced")
    ids, golden = case["input_ids"], case["hidden"]  # (1, 56, 4), (1, 56, H)
    num_codes = ids.shape[1] - PROMPT_LEN
    cache = gpt.new_kv_cache(num_slots=3, max_seq_len=64)
    slot = 2
    with torch.inference_mode():
        prompt = embed.embed(ids[:, :PROMPT_LEN], case["text_mask"][:, :PROMPT_LEN])
        meta = PrefillMetadata.build([slot], [PROMPT_LEN])
        hidden = gpt.prefill(prompt, torch.arange(PROMPT_LEN)[None], meta, cache)
        torch.testing.assert_close(hidden, golden[:, :PROMPT_LEN], rtol=0, atol=ATOL)
        for step in range(num_codes):
            length = PROMPT_LEN + step
            x = embed.embed_codes(ids[:, length])  # (1, H)
            meta_d = DecodeMetadata.build([slot], [length], strategy=strategy)
            out = gpt.decode(x, torch.tensor([length]), meta_d, cache)
            torch.testing.assert_close(out, golden[:, length], rtol=0, atol=ATOL, msg=f"step {step}")
    assert cache.data[:, :, :slot].abs().sum() == 0, "other slots must stay untouched"


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_a_bf16_cache_under_fp32_activations_follows_the_golden_pass(
    gpt: GPT, embed: Embed, strategy: DecodeStrategy
) -> None:
    """A bf16 cache (``EngineConfig.kv_dtype``) stores K/V at bf16 precision and attends in fp32."""
    case = tensors("e1_gpt_teacher_forced")
    ids, golden = case["input_ids"], case["hidden"]
    cache = gpt.new_kv_cache(num_slots=3, max_seq_len=64, dtype=torch.bfloat16)
    fp32_cache = gpt.new_kv_cache(num_slots=3, max_seq_len=64)
    errors = []
    with torch.inference_mode():
        prompt = embed.embed(ids[:, :PROMPT_LEN], case["text_mask"][:, :PROMPT_LEN])
        meta = PrefillMetadata.build([1], [PROMPT_LEN])
        gpt.prefill(prompt, torch.arange(PROMPT_LEN)[None], meta, cache)
        gpt.prefill(prompt, torch.arange(PROMPT_LEN)[None], meta, fp32_cache)
        for length in range(PROMPT_LEN, ids.shape[1]):
            x = embed.embed_codes(ids[:, length])
            meta_d = DecodeMetadata.build([1], [length], strategy=strategy)
            out = gpt.decode(x, torch.tensor([length]), meta_d, cache)
            gpt.decode(x, torch.tensor([length]), meta_d, fp32_cache)
            assert out.dtype == torch.float32
            errors.append(float((out - golden[:, length]).abs().max() / golden[:, length].abs().max()))
    assert cache.data.dtype == torch.bfloat16
    # layer 0's K/V depend on the inputs alone: the fp32 cache's, rounded to bf16 (2^-8 relative)
    torch.testing.assert_close(cache.data[0].float(), fp32_cache.data[0], rtol=2**-8, atol=1e-6)
    assert 0 < max(errors) < 2e-2  # bf16 storage shows, but only at its own precision


def _random_sequences(hidden: int, lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, hidden, generator=gen) for n in lengths]


def _padded_batch(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, H) right-padded prompts and their (B, L) positions."""
    longest = max(len(p) for p in prompts)
    padded = torch.zeros(len(prompts), longest, prompts[0].shape[1])
    for row, p in enumerate(prompts):
        padded[row, : len(p)] = p
    return padded, torch.arange(longest).expand(len(prompts), -1)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_batched_decode_equals_one_at_a_time(gpt: GPT, strategy: DecodeStrategy) -> None:
    """Three sequences at different lengths in scattered slots decode together as they do alone."""
    hidden = gpt.config.hidden_size
    prompt_lens, slots, num_steps = [5, 12, 8], [4, 0, 2], 6
    prompts = _random_sequences(hidden, prompt_lens)
    steps = _random_sequences(hidden, [num_steps] * 3, seed=1)
    with torch.inference_mode():
        # batched: one right-padded prefill, then batched decode steps
        batch_cache = gpt.new_kv_cache(num_slots=5, max_seq_len=32)
        padded, positions = _padded_batch(prompts)
        batch_prefill = gpt.prefill(padded, positions, PrefillMetadata.build(slots, prompt_lens), batch_cache)
        batch_out = []
        for t in range(num_steps):
            lens = [n + t for n in prompt_lens]
            meta = DecodeMetadata.build(slots, lens, strategy=strategy)
            x = torch.stack([s[t] for s in steps])
            batch_out.append(gpt.decode(x, torch.tensor(lens), meta, batch_cache))
        # alone: each sequence in its own fresh cache and slot 0
        for row, (p, s) in enumerate(zip(prompts, steps, strict=True)):
            cache = gpt.new_kv_cache(num_slots=1, max_seq_len=32)
            alone = gpt.prefill(p[None], torch.arange(len(p))[None], PrefillMetadata.build([0], [len(p)]), cache)
            torch.testing.assert_close(batch_prefill[row, : len(p)], alone[0], rtol=0, atol=ATOL)
            for t in range(num_steps):
                length = len(p) + t
                out = gpt.decode(s[t][None], torch.tensor([length]), DecodeMetadata.build([0], [length]), cache)
                torch.testing.assert_close(batch_out[t][row], out[0], rtol=0, atol=ATOL, msg=f"row {row} step {t}")


def test_packed_prefill_equals_the_padded_batch(gpt: GPT) -> None:
    """Prompts back to back in one row (the engine's layout) give each row's padded-batch states and cache."""
    hidden = gpt.config.hidden_size
    prompt_lens, slots = [5, 12, 8], [4, 0, 2]
    prompts = _random_sequences(hidden, prompt_lens, seed=3)
    with torch.inference_mode():
        padded_cache = gpt.new_kv_cache(num_slots=5, max_seq_len=32)
        padded, positions = _padded_batch(prompts)
        padded_out = gpt.prefill(padded, positions, PrefillMetadata.build(slots, prompt_lens), padded_cache)
        packed_cache = gpt.new_kv_cache(num_slots=5, max_seq_len=32)
        packed_positions = torch.cat([torch.arange(n) for n in prompt_lens])[None]
        meta = PrefillMetadata.build(slots, prompt_lens, is_packed=True)
        packed_out = gpt.prefill(torch.cat(prompts)[None], packed_positions, meta, packed_cache)
    assert meta.token_offsets == (0, 5, 17)
    assert packed_out.shape == (1, sum(prompt_lens), hidden)
    for row, (offset, count) in enumerate(zip(meta.token_offsets, prompt_lens, strict=True)):
        torch.testing.assert_close(packed_out[0, offset : offset + count], padded_out[row, :count], rtol=0, atol=ATOL)
    torch.testing.assert_close(packed_cache.data, padded_cache.data, rtol=0, atol=ATOL)
    with torch.inference_mode(), pytest.raises(EngineError, match="packed prefill takes"):
        gpt.prefill(padded, positions, meta, packed_cache)


def test_prefill_can_extend_a_cached_prompt(gpt: GPT) -> None:
    (seq,) = _random_sequences(gpt.config.hidden_size, [14])
    positions = torch.arange(14)[None]
    with torch.inference_mode():
        dense = gpt(seq[None], positions)
        cache = gpt.new_kv_cache(num_slots=2, max_seq_len=20)
        first = gpt.prefill(seq[None, :9], positions[:, :9], PrefillMetadata.build([1], [9]), cache)
        rest = gpt.prefill(seq[None, 9:], positions[:, 9:], PrefillMetadata.build([1], [5], start_positions=[9]), cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), dense, rtol=0, atol=ATOL)


def test_padded_query_rows_are_zero_not_nan() -> None:
    cfg = tiny_config()
    attention = Attention(cfg).eval()
    x = torch.randn(2, 5, cfg.hidden_size)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)(torch.arange(5).expand(2, -1), x.dtype)
    with torch.inference_mode():
        attention.o_proj.weight.copy_(torch.eye(cfg.hidden_size))  # expose the attention output
        out = attention(x, rotary, DenseMetadata(mask), None)
    assert torch.isfinite(out).all()
    assert out[0, :2].abs().max() == 0
    assert out[0, 2:].abs().min() > 0


def test_overflow_and_bad_slots_raise(gpt: GPT) -> None:
    cache = gpt.new_kv_cache(num_slots=2, max_seq_len=8)
    x = torch.zeros(1, gpt.config.hidden_size)
    with torch.inference_mode():
        with pytest.raises(EngineError, match="max_seq_len"):
            gpt.decode(x, torch.tensor([8]), DecodeMetadata.build([0], [8]), cache)
        with pytest.raises(EngineError, match="slot 5"):
            gpt.decode(x, torch.tensor([0]), DecodeMetadata.build([5], [0]), cache)
        with pytest.raises(EngineError, match="same KV slot"):
            DecodeMetadata.build([1, 1], [0, 3])
        with pytest.raises(EngineError, match="max_seq_len"):
            gpt.prefill(torch.zeros(1, 9, x.shape[1]), torch.arange(9)[None], PrefillMetadata.build([0], [9]), cache)


def test_kv_bytes_per_token_sizes_the_cache() -> None:
    full = GPTConfig()
    assert kv_bytes_per_token(full) == 2 * 20 * 12 * 64 * 4
    assert kv_bytes_per_token(full, torch.bfloat16) == 2 * 20 * 12 * 64 * 2
    model = GPT(tiny_config())
    cache = model.new_kv_cache(num_slots=3, max_seq_len=10)
    assert cache.num_bytes == 3 * 10 * model.kv_bytes_per_token()


def test_rotary_matches_the_rotate_half_formula() -> None:
    rope = RotaryEmbedding(head_dim=16, theta=10000.0)
    positions = torch.tensor([[0, 1, 7, 300]])
    x = torch.randn(1, 3, 4, 16)  # (B, heads, L, d)
    rotary = rope(positions, torch.float32)
    freqs = positions[..., None].float() / 10000.0 ** (torch.arange(0, 16, 2).float() / 16)  # (1, 4, 8)
    cos = torch.cat((freqs, freqs), -1).cos()[:, None]
    sin = torch.cat((freqs, freqs), -1).sin()[:, None]
    torch.testing.assert_close(rotary.apply(x), x * cos + rotate_half(x) * sin, rtol=0, atol=1e-6)
    assert torch.equal(rotary.apply(x)[:, :, 0], x[:, :, 0]), "position 0 is not rotated"


def _resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc/self/status")
def test_a_cpu_cache_commits_memory_only_where_tokens_are_written() -> None:
    """16 slots of 2048 tokens reserve 3.75 GiB; one 200-token sequence must cost
    what it writes (a few MiB), and unwritten positions must still read as zeros."""
    cfg = GPTConfig()  # full size
    before = _resident_bytes()
    cache = KVCache(cfg.num_hidden_layers, 16, cfg.num_key_value_heads, 2048, cfg.head_dim)
    assert cache.num_bytes == 3840 * 2**20
    for index in range(cfg.num_hidden_layers):
        keys, values = cache.layer(index)
        keys[3, :, :200] = 1.0
        values[3, :, :200] = -1.0
    assert float(cache.data[:, :, 3].abs().sum()) == 2 * 20 * 12 * 200 * 64  # the rest of the slot reads 0
    assert not cache.data[:, :, 4, :, :300].any()  # and so does a slot nobody wrote
    grown = _resident_bytes() - before
    written = 2 * 20 * 12 * 200 * 64 * 4
    assert grown < written + 64 * 2**20, f"{grown / 2**20:.0f} MiB resident for {written / 2**20:.1f} MiB written"
