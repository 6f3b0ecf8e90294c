"""The DVAE against the official goldens: decode (case h1) and encode (case j6).

Case j6 records only the codes that the official ``sample_audio_speaker`` made
from piece 0 ("你好。") generated alone: [Stts][empty_spk][speed_5]你好。[Ptts],
greedy, repetition penalty 1.05, min_new_token 10, max_new_token 30, decoded
with the hidden-state Decoder and Vocos. That waveform is in no golden file, so
:func:`_greedy_hiddens` regenerates it with a minimal reference Llama (checked
against case f4 first) and the test encodes it.
"""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from tests.golden import FIXTURE_DIR, fixture_config, tensors
from turbotts.config import ModelConfig, VQConfig, model_config_from_dict
from turbotts.errors import InvalidInputError
from turbotts.model.decoder import HiddenDecoder
from turbotts.model.dvae import DVAE, GFSQ
from turbotts.model.vocos import Vocos

TOL = 1e-5
ASSET = FIXTURE_DIR / "asset"
AUDIO_EOS = 625


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return model_config_from_dict(fixture_config(), None)


@pytest.fixture(scope="module")
def dvae(config: ModelConfig) -> DVAE:
    model = DVAE(config.dvae)
    model.load_state_dict(load_file(str(ASSET / "DVAE.safetensors")), strict=True)
    return model.eval()


def test_vq_feats_match_golden(dvae: DVAE) -> None:
    golden = tensors("h1_dvae_decode")
    torch.testing.assert_close(dvae.codes_to_features(golden["codes"]), golden["vq_feats"], atol=TOL, rtol=0)


def test_batched_mel_matches_golden(dvae: DVAE) -> None:
    golden = tensors("h1_dvae_decode")
    mel = dvae.decode(golden["codes"])
    assert mel.shape == (2, 100, 80)
    torch.testing.assert_close(mel, golden["mel"], atol=TOL, rtol=0)


@pytest.mark.parametrize(("index", "num_frames"), [(0, 40), (1, 3)])
def test_single_mel_matches_golden(dvae: DVAE, index: int, num_frames: int) -> None:
    golden = tensors("h1_dvae_decode")
    mel = dvae.decode(golden["codes"][index : index + 1, :, :num_frames])  # (1, 4, T_i)
    torch.testing.assert_close(mel, golden[f"mel_single_{index}"], atol=TOL, rtol=0)


def test_decode_rejects_eos_and_bad_shape(dvae: DVAE) -> None:
    with pytest.raises(InvalidInputError, match="strip EOS"):
        dvae.decode(torch.full((1, 4, 3), AUDIO_EOS))
    with pytest.raises(InvalidInputError, match="codes must be"):
        dvae.decode(torch.zeros(1, 3, 3, dtype=torch.long))


def test_fsq_quantize_inverts_dequantize_on_the_grid() -> None:
    """With identity projections, quantize(dequantize(codes)) must give the codes back exactly."""
    gfsq = GFSQ(VQConfig(dim=8, levels=(5, 5, 5, 5), G=2, R=2))
    with torch.no_grad():
        for rvq in gfsq.groups:
            rvq.project_in.weight.copy_(torch.eye(4))
            rvq.project_in.bias.zero_()
            rvq.project_out.weight.copy_(torch.eye(4))
            rvq.project_out.bias.zero_()
    codes = torch.randint(0, 625, (3, 4, 50))
    grid = gfsq.dequantize(codes)  # (3, 8, 50): sum over r of code_r * 5**-r, |.| <= 1.2
    pre_clamp = torch.atanh(grid / 1.25) * 1.25  # undo the soft clamp
    assert torch.equal(gfsq.quantize(pre_clamp), codes)
    # the implicit codebook: digit d -> d/2 - 1, second stage scaled by 1/5
    values = gfsq.dequantize(torch.tensor([[[0], [624], [0], [0]]]))[0, :4, 0]
    torch.testing.assert_close(values, torch.full((4,), -1.0 + 0.2))


def test_encode_shape_relation(dvae: DVAE) -> None:
    """A decode of T frames has 512*T - 256 samples and encodes back to T frames."""
    for num_frames in (2, 3, 7, 30):
        codes = dvae.encode(torch.randn(512 * num_frames - 256))
        assert codes.shape == (4, num_frames)
        assert codes.dtype == torch.int64
        assert int(codes.min()) >= 0 and int(codes.max()) < 625
    assert dvae.encode(torch.randn(2, 15104)).shape == (2, 4, 30)
    with pytest.raises(InvalidInputError, match="513 are needed"):
        dvae.encode(torch.randn(256))  # case j7: a one-frame reference is too short


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def _llama(emb: torch.Tensor, p: dict[str, torch.Tensor], num_layers: int, num_heads: int) -> torch.Tensor:
    """Reference LlamaModel forward, no cache: (S, H) embeddings -> (S, H) last hidden states."""
    seq, hidden = emb.shape
    head_dim = hidden // num_heads
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv_freq).repeat(1, 2)  # (S, head_dim)
    cos, sin = angles.cos(), angles.sin()

    def rope(x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, -1)
        return x * cos + torch.cat([-b, a], -1) * sin

    causal = torch.full((seq, seq), float("-inf")).triu(1)
    x = emb
    for i in range(num_layers):
        pre = f"layers.{i}."
        h = _rms_norm(x, p[pre + "input_layernorm.weight"])
        q, k, v = (
            (h @ p[f"{pre}self_attn.{n}_proj.weight"].T).view(seq, num_heads, head_dim).transpose(0, 1) for n in "qkv"
        )  # each (heads, S, head_dim)
        att = torch.softmax(rope(q) @ rope(k).transpose(1, 2) / math.sqrt(head_dim) + causal, -1) @ v
        x = x + att.transpose(0, 1).reshape(seq, hidden) @ p[pre + "self_attn.o_proj.weight"].T  # (S, H)
        h = _rms_norm(x, p[pre + "post_attention_layernorm.weight"])
        gated = torch.nn.functional.silu(h @ p[pre + "mlp.gate_proj.weight"].T) * (h @ p[pre + "mlp.up_proj.weight"].T)
        x = x + gated @ p[pre + "mlp.down_proj.weight"].T
    return _rms_norm(x, p["norm.weight"])


def _greedy_hiddens(text: str, max_new: int, min_new: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Official _infer_code at temperature 1e-6 (argmax) for one text -> (ids (T, 4), hiddens (T, H))."""
    tokenizer = Tokenizer.from_file(str(ASSET / "tokenizer" / "tokenizer.json"))
    ids = tokenizer.encode(f"[Stts][empty_spk][speed_5]{text}[Ptts]", add_special_tokens=False).ids
    gpt = load_file(str(ASSET / "gpt" / "model.safetensors"))
    emb = load_file(str(ASSET / "Embed.safetensors"))
    heads = []
    for q in range(4):
        g, v = (emb[f"head_code.{q}.parametrizations.weight.original{i}"] for i in (0, 1))
        heads.append(g * v / v.norm(dim=1, keepdim=True))  # weight norm, (626, H)
    inputs = [emb["emb_text.weight"][i] for i in ids]
    generated: list[torch.Tensor] = []
    hiddens = []
    for step in range(max_new):
        last = _llama(torch.stack(inputs), gpt, num_layers=2, num_heads=4)[-1]  # (H,)
        logits = torch.stack([head @ last for head in heads])  # (4, 626)
        if generated:
            counts = torch.stack(
                [torch.bincount(col, minlength=626) for col in torch.stack(generated[-16:]).T]
            ).float()  # (4, 626)
            alpha = 1.05**counts
            logits = torch.where(logits < 0, logits * alpha, logits / alpha)
        if step < min_new:
            logits[:, AUDIO_EOS] = float("-inf")
        nxt = logits.argmax(-1)  # (4,)
        if bool((nxt == AUDIO_EOS).any()):
            break
        hiddens.append(last)
        generated.append(nxt)
        inputs.append(torch.stack([emb[f"emb_code.{q}.weight"][nxt[q]] for q in range(4)]).sum(0))
    return torch.stack(generated), torch.stack(hiddens)


def test_reference_generator_reproduces_case_f4() -> None:
    golden = tensors("f4_infer_code_single")
    ids, hiddens = _greedy_hiddens("你好，欢迎使用语音合成。", max_new=40, min_new=0)
    assert torch.equal(ids, golden["ids_0"])
    torch.testing.assert_close(hiddens, golden["hiddens_0"], atol=1e-5, rtol=0)


def test_encoder_reproduces_case_j6_speaker_codes(dvae: DVAE, config: ModelConfig) -> None:
    decoder = HiddenDecoder(config.decoder)
    decoder.load_state_dict(load_file(str(ASSET / "Decoder.safetensors")), strict=True)
    vocos = Vocos(config.vocos)
    vocos.load_state_dict(load_file(str(ASSET / "Vocos.safetensors")), strict=True)
    _, hiddens = _greedy_hiddens("你好。", max_new=30, min_new=10)
    wav = vocos.decode(decoder.decode(hiddens.T.unsqueeze(0)))[0]  # (512*30 - 256,)
    assert wav.shape == (15104,)
    codes = dvae.encode(wav)
    assert torch.equal(codes, tensors("j6_e2e_split_text_single_string")["spk_smp_codes"])
