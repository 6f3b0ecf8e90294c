"""Names and shapes of every tensor in the official weight files, from a config.

It is the written-down contract of the release layout: the dummy writer uses
it, and tests check that our modules load exactly these names.
"""

from __future__ import annotations

from turbotts.config import ConvDecoderConfig, GPTConfig, ModelConfig
from turbotts.model import checkpoint as ckpt

Shapes = dict[str, tuple[int, ...]]


def _conv_stack(prefix: str, c: ConvDecoderConfig) -> Shapes:
    shapes: Shapes = {
        f"{prefix}.conv_in.0.weight": (c.bn_dim, c.idim, 3),
        f"{prefix}.conv_in.0.bias": (c.bn_dim,),
        f"{prefix}.conv_in.2.weight": (c.hidden, c.bn_dim, 3),
        f"{prefix}.conv_in.2.bias": (c.hidden,),
        f"{prefix}.conv_out.weight": (c.odim, c.hidden, 1),
    }
    for i in range(c.n_layer):
        block = f"{prefix}.decoder_block.{i}"
        shapes.update(
            {
                f"{block}.dwconv.weight": (c.hidden, 1, 7),
                f"{block}.dwconv.bias": (c.hidden,),
                f"{block}.norm.weight": (c.hidden,),
                f"{block}.norm.bias": (c.hidden,),
                f"{block}.pwconv1.weight": (4 * c.hidden, c.hidden),
                f"{block}.pwconv1.bias": (4 * c.hidden,),
                f"{block}.pwconv2.weight": (c.hidden, 4 * c.hidden),
                f"{block}.pwconv2.bias": (c.hidden,),
                f"{block}.weight": (c.hidden,),
            }
        )
    return shapes


def _gpt(c: GPTConfig) -> Shapes:
    kv_dim = c.num_key_value_heads * c.head_dim
    shapes: Shapes = {"norm.weight": (c.hidden_size,)}
    for i in range(c.num_hidden_layers):
        layer = f"layers.{i}"
        shapes.update(
            {
                f"{layer}.input_layernorm.weight": (c.hidden_size,),
                f"{layer}.post_attention_layernorm.weight": (c.hidden_size,),
                f"{layer}.self_attn.q_proj.weight": (c.hidden_size, c.hidden_size),
                f"{layer}.self_attn.k_proj.weight": (kv_dim, c.hidden_size),
                f"{layer}.self_attn.v_proj.weight": (kv_dim, c.hidden_size),
                f"{layer}.self_attn.o_proj.weight": (c.hidden_size, c.hidden_size),
                f"{layer}.mlp.gate_proj.weight": (c.intermediate_size, c.hidden_size),
                f"{layer}.mlp.up_proj.weight": (c.intermediate_size, c.hidden_size),
                f"{layer}.mlp.down_proj.weight": (c.hidden_size, c.intermediate_size),
            }
        )
    return shapes


def _embed(c: GPTConfig) -> Shapes:
    shapes: Shapes = {"emb_text.weight": (c.num_text_tokens, c.hidden_size)}
    for q in range(c.num_vq):
        shapes[f"emb_code.{q}.weight"] = (c.num_audio_tokens, c.hidden_size)
    heads = {f"head_code.{q}": c.num_audio_tokens for q in range(c.num_vq)} | {"head_text": c.num_text_tokens}
    for head, rows in heads.items():
        shapes[f"{head}.parametrizations.weight.original0"] = (rows, 1)
        shapes[f"{head}.parametrizations.weight.original1"] = (rows, c.hidden_size)
    return shapes


def _mel_front(prefix: str, config: ModelConfig) -> Shapes:
    n_fft = config.vocos.n_fft
    return {
        f"{prefix}.mel_spec.mel_scale.fb": (n_fft // 2 + 1, config.vocos.input_channels),
        f"{prefix}.mel_spec.spectrogram.window": (n_fft,),
    }


def _dvae(config: ModelConfig) -> Shapes:
    d = config.dvae
    num_mels = config.vocos.input_channels
    group_dim = d.vq.dim // d.vq.G
    codebook_dim = len(d.vq.levels)
    shapes: Shapes = {"coef": (1, num_mels, 1), "out_conv.weight": (num_mels, d.decoder.idim, 3)}
    shapes |= _conv_stack("decoder", d.decoder) | _conv_stack("encoder", d.encoder)
    shapes |= {
        "downsample_conv.0.weight": (d.decoder.idim, num_mels, 3),
        "downsample_conv.0.bias": (d.decoder.idim,),
        "downsample_conv.2.weight": (d.decoder.idim, d.decoder.idim, 4),
        "downsample_conv.2.bias": (d.decoder.idim,),
    }
    shapes |= _mel_front("preprocessor_mel", config)
    for g in range(d.vq.G):
        rvq = f"vq_layer.quantizer.rvqs.{g}"
        shapes |= {
            f"{rvq}.project_in.weight": (codebook_dim, group_dim),
            f"{rvq}.project_in.bias": (codebook_dim,),
            f"{rvq}.project_out.weight": (group_dim, codebook_dim),
            f"{rvq}.project_out.bias": (group_dim,),
        }
    return shapes


def _decoder(config: ModelConfig) -> Shapes:
    num_mels = config.vocos.input_channels
    return {"coef": (1, num_mels, 1), "out_conv.weight": (num_mels, config.decoder.idim, 3)} | _conv_stack(
        "decoder", config.decoder
    )


def _vocos(config: ModelConfig) -> Shapes:
    v = config.vocos
    shapes: Shapes = {
        "backbone.embed.weight": (v.dim, v.input_channels, 7),
        "backbone.embed.bias": (v.dim,),
        "backbone.norm.weight": (v.dim,),
        "backbone.norm.bias": (v.dim,),
        "backbone.final_layer_norm.weight": (v.dim,),
        "backbone.final_layer_norm.bias": (v.dim,),
        "head.out.weight": (v.n_fft + 2, v.dim),
        "head.out.bias": (v.n_fft + 2,),
        "head.istft.window": (v.n_fft,),
    }
    for i in range(v.num_layers):
        block = f"backbone.convnext.{i}"
        shapes |= {
            f"{block}.dwconv.weight": (v.dim, 1, 7),
            f"{block}.dwconv.bias": (v.dim,),
            f"{block}.gamma": (v.dim,),
            f"{block}.norm.weight": (v.dim,),
            f"{block}.norm.bias": (v.dim,),
            f"{block}.pwconv1.weight": (v.intermediate_dim, v.dim),
            f"{block}.pwconv1.bias": (v.intermediate_dim,),
            f"{block}.pwconv2.weight": (v.dim, v.intermediate_dim),
            f"{block}.pwconv2.bias": (v.dim,),
        }
    return shapes | _mel_front("feature_extractor", config)


def official_shapes(config: ModelConfig) -> dict[str, Shapes]:
    """Relative file path -> {tensor name: shape} for the whole release."""
    return {
        ckpt.GPT_WEIGHTS_FILE: _gpt(config.gpt),
        ckpt.EMBED_FILE: _embed(config.gpt),
        ckpt.DVAE_FILE: _dvae(config),
        ckpt.DECODER_FILE: _decoder(config),
        ckpt.VOCOS_FILE: _vocos(config),
    }
