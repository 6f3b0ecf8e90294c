"""Deterministic random weights in the official layout (vLLM's "dummy" load format).

Tests run on a tiny one and benchmarks on a full-size one, so neither needs the
hub. Every tensor is drawn from its own generator seeded by (seed, name): the
same seed always gives the same checkpoint, whatever order tensors are made in.
Scales keep activations sane (weights N(0, 1/fan_in), norms near 1), the mel
filterbank and windows are the real ones, and the tokenizer is the tiny
fixture's vocabulary padded with unused entries up to the model's text vocab.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from turbotts.config import ConvDecoderConfig, DVAEConfig, GPTConfig, ModelConfig, VocosConfig, VQConfig
from turbotts.errors import CheckpointError
from turbotts.model import checkpoint as ckpt
from turbotts.model.melbank import mel_filterbank

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
TOKENIZER_DATA = DATA_DIR / "tokenizer"
NUM_SPECIAL_TAIL = 50  # [Stts] ... [extra_7]: the last 50 ids of the vocabulary

TINY_CONFIG = ModelConfig(
    gpt=GPTConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        num_text_tokens=768,
    ),
    decoder=ConvDecoderConfig(idim=32, odim=32, hidden=32, n_layer=2, bn_dim=16),
    dvae=DVAEConfig(
        encoder=ConvDecoderConfig(idim=32, odim=64, hidden=32, n_layer=2, bn_dim=16),
        decoder=ConvDecoderConfig(idim=32, odim=32, hidden=32, n_layer=2, bn_dim=16),
        vq=VQConfig(dim=64),
    ),
    vocos=VocosConfig(dim=32, intermediate_dim=64, num_layers=2),
)
FULL_CONFIG = ModelConfig()
SIZES = {"tiny": TINY_CONFIG, "full": FULL_CONFIG}


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def dummy_tensor(name: str, shape: tuple[int, ...], seed: int, config: ModelConfig) -> torch.Tensor:
    """A plausible random value for the official tensor ``name``."""
    gen = _generator(seed, name)
    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("mel_scale.fb"):
        return mel_filterbank(n_fft=config.vocos.n_fft, n_mels=shape[1], sample_rate_hz=config.sample_rate_hz)
    if name.endswith("window"):
        return torch.hann_window(shape[0])
    if name == "coef":
        return 0.5 + torch.rand(shape, generator=gen)
    if leaf == "original0":  # weight-norm magnitude
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    if leaf == "original1" or name.startswith("emb_"):
        return torch.randn(shape, generator=gen)
    is_norm = "norm" in name and len(shape) == 1
    if is_norm:
        return (
            (1.0 + 0.1 * torch.randn(shape, generator=gen))
            if leaf == "weight"
            else 0.05 * torch.randn(shape, generator=gen)
        )
    if len(shape) == 1 and leaf in ("gamma", "weight"):  # ConvNeXt layer scale
        return 0.3 + 0.03 * torch.randn(shape, generator=gen)
    if leaf == "bias":
        return 0.02 * torch.randn(shape, generator=gen)
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    return torch.randn(shape, generator=gen) / math.sqrt(fan_in)


def dummy_state_dicts(config: ModelConfig, seed: int) -> dict[str, dict[str, torch.Tensor]]:
    """Random tensors for every official weight file, keyed by relative path."""
    from turbotts.model.official_keys import official_shapes

    return {
        relative: {name: dummy_tensor(name, shape, seed, config).contiguous() for name, shape in shapes.items()}
        for relative, shapes in official_shapes(config).items()
    }


def tokenizer_json(num_text_tokens: int) -> str:
    """The fixture vocabulary stretched to ``num_text_tokens`` ids, specials kept last."""
    data = json.loads((TOKENIZER_DATA / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = data["model"]["vocab"]
    ordered = sorted(vocab.items(), key=lambda item: item[1])
    regular, special = ordered[:-NUM_SPECIAL_TAIL], ordered[-NUM_SPECIAL_TAIL:]
    num_filler = num_text_tokens - len(ordered)
    if num_filler < 0:
        raise ValueError(f"num_text_tokens={num_text_tokens} is smaller than the base vocabulary ({len(ordered)})")
    tokens = [tok for tok, _ in regular] + [f"[unused{i}]" for i in range(num_filler)] + [tok for tok, _ in special]
    new_ids = {tok: i for i, tok in enumerate(tokens)}
    data["model"]["vocab"] = new_ids
    for added in data["added_tokens"]:
        added["id"] = new_ids[added["content"]]
    for entry in data["post_processor"]["special_tokens"].values():
        entry["ids"] = [new_ids[t] for t in entry["tokens"]]
    return json.dumps(data, ensure_ascii=False)


def tokenizer_config_json(num_text_tokens: int) -> str:
    """The HF tokenizer_config.json with its special-token ids moved like the vocabulary's."""
    data = json.loads((TOKENIZER_DATA / "tokenizer_config.json").read_text(encoding="utf-8"))
    base_size = len(json.loads((TOKENIZER_DATA / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    shift = num_text_tokens - base_size
    first_tail_id = base_size - NUM_SPECIAL_TAIL
    data["added_tokens_decoder"] = {
        str(int(k) + shift if int(k) >= first_tail_id else int(k)): v
        for k, v in data.get("added_tokens_decoder", {}).items()
    }
    return json.dumps(data, ensure_ascii=False, indent=2)


def spk_stat_string(hidden_size: int, seed: int) -> str:
    """Speaker statistics (std, mean) for a random checkpoint, official encoding."""
    from turbotts.model.speaker import encode_stat

    gen = _generator(seed, "spk_stat")
    std = (0.5 + torch.rand(hidden_size, generator=gen)).half()
    mean = (0.1 * torch.randn(hidden_size, generator=gen)).half()
    return encode_stat(std, mean)


def root_config(config: ModelConfig, size: str, seed: int) -> dict[str, Any]:
    """The fixture-style root config.json that marks the checkpoint as non-official."""
    g = config.gpt
    conv = lambda c: {"idim": c.idim, "odim": c.odim, "hidden": c.hidden, "n_layer": c.n_layer, "bn_dim": c.bn_dim}  # noqa: E731
    return {
        "size": size,
        "seed": seed,
        "gpt": {
            "hidden_size": g.hidden_size,
            "intermediate_size": g.intermediate_size,
            "num_attention_heads": g.num_attention_heads,
            "num_hidden_layers": g.num_hidden_layers,
            "num_audio_tokens": g.num_audio_tokens,
            "num_text_tokens": g.num_text_tokens,
            "num_vq": g.num_vq,
        },
        "decoder": conv(config.decoder),
        "dvae": {
            "encoder": conv(config.dvae.encoder),
            "decoder": conv(config.dvae.decoder),
            "vq": {
                "dim": config.dvae.vq.dim,
                "levels": list(config.dvae.vq.levels),
                "G": config.dvae.vq.G,
                "R": config.dvae.vq.R,
            },
        },
        "vocos": {
            "backbone": {
                "init_args": {
                    "input_channels": config.vocos.input_channels,
                    "dim": config.vocos.dim,
                    "intermediate_dim": config.vocos.intermediate_dim,
                    "num_layers": config.vocos.num_layers,
                }
            },
            "head": {
                "init_args": {
                    "dim": config.vocos.dim,
                    "n_fft": config.vocos.n_fft,
                    "hop_length": config.vocos.hop_length,
                }
            },
        },
        "spk_stat": spk_stat_string(g.hidden_size, seed),
    }


def gpt_config_json(config: GPTConfig) -> dict[str, Any]:
    return {
        "architectures": ["LlamaModel"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "num_hidden_layers": config.num_hidden_layers,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "max_position_embeddings": config.max_position_embeddings,
        "head_dim": config.head_dim,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }


def write_dummy_checkpoint(target: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a complete random checkpoint in the official layout; returns its root."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    config = SIZES[size]
    root = Path(target).expanduser()
    (root / "asset" / "gpt").mkdir(parents=True, exist_ok=True)
    (root / ckpt.TOKENIZER_DIR).mkdir(parents=True, exist_ok=True)
    for relative, tensors in dummy_state_dicts(config, seed).items():
        metadata = {"format": "pt"} if relative == ckpt.GPT_WEIGHTS_FILE else None
        save_file(tensors, str(root / relative), metadata=metadata)
    (root / ckpt.GPT_CONFIG_FILE).write_text(json.dumps(gpt_config_json(config.gpt), indent=2))
    (root / ckpt.TOKENIZER_FILE).write_text(tokenizer_json(config.gpt.num_text_tokens), encoding="utf-8")
    (root / ckpt.TOKENIZER_DIR / "special_tokens_map.json").write_bytes(
        (TOKENIZER_DATA / "special_tokens_map.json").read_bytes()
    )
    (root / ckpt.TOKENIZER_DIR / "tokenizer_config.json").write_text(
        tokenizer_config_json(config.gpt.num_text_tokens), encoding="utf-8"
    )
    (root / ckpt.ROOT_CONFIG_FILE).write_text(json.dumps(root_config(config, size, seed), ensure_ascii=False, indent=2))
    return root


class DummyFiles:
    """Random weights in the official layout, made in memory file by file (see :class:`CheckpointFiles`)."""

    def __init__(self, size: str = "tiny", seed: int = 0) -> None:
        if size not in SIZES:
            raise CheckpointError(f"--dummy-size must be one of {', '.join(SIZES)}, not {size!r}")
        self.size, self.seed, self.config = size, seed, SIZES[size]
        self.origin = f"dummy-{size}"
        self.is_dummy = True
        num_text_tokens = self.config.gpt.num_text_tokens
        self._texts = {
            ckpt.ROOT_CONFIG_FILE: json.dumps(root_config(self.config, size, seed), ensure_ascii=False),
            ckpt.GPT_CONFIG_FILE: json.dumps(gpt_config_json(self.config.gpt)),
            ckpt.TOKENIZER_FILE: tokenizer_json(num_text_tokens),
        }

    def has(self, relative: str) -> bool:
        from turbotts.model.official_keys import official_shapes

        return relative in self._texts or relative in official_shapes(self.config)

    def read(self, relative: str) -> bytes:
        if relative not in self._texts:
            raise CheckpointError(f"dummy weights have no file {relative}")
        return self._texts[relative].encode("utf-8")

    def tensors(self, relative: str) -> dict[str, torch.Tensor]:
        from turbotts.model.official_keys import official_shapes

        shapes = official_shapes(self.config).get(relative)
        if shapes is None:
            raise CheckpointError(f"dummy weights have no file {relative}")
        return {name: dummy_tensor(name, shape, self.seed, self.config).contiguous() for name, shape in shapes.items()}

    def fingerprint(self) -> str:
        return hashlib.sha256(f"dummy:{self.size}:{self.seed}".encode()).hexdigest()[:16]
