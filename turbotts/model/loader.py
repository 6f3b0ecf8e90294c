"""Build a :class:`ChatTTSModel` from a checkpoint directory, the official
release (downloaded on first use) or dummy weights.

Every weight file is loaded with shape checks and strict key matching, so a
checkpoint of the wrong size or layout fails here with the file's name, not
later inside a matmul.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from turbotts.config import ModelConfig, model_config_from_dict
from turbotts.errors import CheckpointError
from turbotts.model import checkpoint as ckpt
from turbotts.model.chattts import ChatTTSModel, ChatTTSModules
from turbotts.model.dummy import SIZES, dummy_state_dicts, spk_stat_string, tokenizer_json
from turbotts.model.embed import fold_weight_norm
from turbotts.model.speaker import SpeakerStats
from turbotts.model.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

LOAD_FORMATS = ("auto", "dummy")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
QUANT_MODES = ("none", "int8")


@dataclass(frozen=True)
class ModelSource:
    """Where weights come from: a directory, the official release, or random (dummy)."""

    checkpoint: Path | None = None
    load_format: str = "auto"
    dummy_size: str = "tiny"
    dummy_seed: int = 0
    sealed_key_env: str | None = None  # environment variable holding the AES key of a sealed checkpoint
    public_key: Path | None = None  # Ed25519 key that must have signed the checkpoint's manifest

    def __post_init__(self) -> None:
        if self.load_format not in LOAD_FORMATS:
            raise CheckpointError(f"--load-format must be one of {', '.join(LOAD_FORMATS)}, not {self.load_format!r}")
        if self.load_format == "dummy" and self.dummy_size not in SIZES:
            raise CheckpointError(f"--dummy-size must be one of {', '.join(SIZES)}, not {self.dummy_size!r}")
        if self.load_format == "dummy" and self.checkpoint is not None:
            raise CheckpointError("pass either --checkpoint or --load-format dummy, not both")
        if self.sealed_key_env is not None and (self.checkpoint is None or self.public_key is None):
            raise CheckpointError("a sealed checkpoint needs --checkpoint DIR and --public-key PEM besides --key-env")

    @property
    def is_dummy(self) -> bool:
        return self.load_format == "dummy"


def _load_strict(module: nn.Module, state: dict[str, torch.Tensor], name: str) -> None:
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        details = []
        if missing:
            details.append(f"missing {missing[:5]}")
        if unexpected:
            details.append(f"unexpected {unexpected[:5]}")
        if wrong:
            k = wrong[0]
            details.append(f"{k} is {tuple(state[k].shape)}, the config wants {tuple(expected[k].shape)}")
        raise CheckpointError(f"{name} does not fit the model config: {'; '.join(details)}")
    module.load_state_dict(state, strict=True)


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}); download it again") from exc


def _populate(modules: ChatTTSModules, states: dict[str, dict[str, torch.Tensor]], origin: str) -> None:
    targets: dict[str, nn.Module] = {
        ckpt.GPT_WEIGHTS_FILE: modules.gpt,
        ckpt.EMBED_FILE: modules.embed,
        ckpt.DECODER_FILE: modules.decoder,
        ckpt.DVAE_FILE: modules.dvae,
        ckpt.VOCOS_FILE: modules.vocos,
    }
    for relative, module in targets.items():
        state = states[relative]
        if relative == ckpt.EMBED_FILE:
            state = fold_weight_norm(state)
        _load_strict(module, state, f"{origin}/{relative}")


def _finish(modules: ChatTTSModules, device: str, dtype: str, quant: str) -> tuple[torch.device, torch.dtype]:
    """Place the modules; only the GPT and its embeddings/heads take ``dtype`` and ``quant``."""
    if quant not in QUANT_MODES:
        raise CheckpointError(f"--quant must be one of {', '.join(QUANT_MODES)}, not {quant!r}")
    if dtype not in DTYPES:
        raise CheckpointError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    try:
        target = torch.device(device)
    except RuntimeError as exc:
        raise CheckpointError(f"--device {device!r} is not a valid torch device") from exc
    if target.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("--device cuda was asked for, but torch sees no CUDA GPU; use --device cpu")
    modules.eval().requires_grad_(False).to(target)
    modules.gpt.to(DTYPES[dtype])
    modules.embed.to(DTYPES[dtype])
    if quant != "none":
        from turbotts.model.quant import quantize_gpt

        quantize_gpt(modules, quant)
    else:
        # one matmul for q/k/v, gate/up and the 4 code heads, prepacked for oneDNN on CPU:
        # about 2x faster small-batch decode (the unfused weights stay the source of truth)
        modules.gpt.fuse()
        modules.embed.fuse()
    return target, DTYPES[dtype]


def _refuse_sealed_without_key(directory: Path) -> None:
    """A sealed directory has no plain weights: say which flags open it instead of "wrong layout"."""
    from turbotts.guard.seal import MANIFEST_FILE, SEALED_FORMAT

    manifest = directory.expanduser() / MANIFEST_FILE
    try:
        is_sealed = json.loads(manifest.read_bytes()).get("format") == SEALED_FORMAT
    except (OSError, ValueError, AttributeError):
        return
    if is_sealed:
        raise CheckpointError(
            f"{directory} is a sealed checkpoint: pass --key-env VAR (the environment variable holding its AES key) "
            "and --public-key PEM (the signer's public key), or set TURBOTTS_KEY_ENV and TURBOTTS_PUBLIC_KEY"
        )


def resolve_checkpoint(source: ModelSource) -> ckpt.Checkpoint:
    """Open the directory (or download the release) and check its signed manifest if asked."""
    if source.checkpoint is not None:
        _refuse_sealed_without_key(Path(source.checkpoint))
        checkpoint = ckpt.open_checkpoint(source.checkpoint)
        if source.public_key is not None:
            from turbotts.guard.seal import load_public_key, verify_plain_manifest

            if not verify_plain_manifest(checkpoint.root, load_public_key(source.public_key)):
                raise CheckpointError(
                    f"{checkpoint.root} has no signed manifest.json but --public-key was given; sign it first"
                )
        return checkpoint
    from turbotts.model.download import download_official

    return download_official()


def load_model(source: ModelSource, *, device: str = "cpu", dtype: str = "fp32", quant: str = "none") -> ChatTTSModel:
    """Load everything a synthesis needs.

    Raises:
        CheckpointError: files missing, unreadable, of the wrong shape, or (for the
            official release) not matching the published digests.
        DownloadError: no checkpoint given and the hub is unreachable.
    """
    if source.is_dummy:
        return _load_dummy(source, device=device, dtype=dtype, quant=quant)
    if source.sealed_key_env is not None:
        return _load_sealed(source, device=device, dtype=dtype, quant=quant)
    checkpoint = resolve_checkpoint(source)
    config = checkpoint.model_config()
    modules = ChatTTSModules(config)
    states = {
        relative: _read_safetensors(checkpoint.path(relative))
        for relative in ckpt.REQUIRED_FILES
        if relative.endswith(".safetensors")
    }
    _populate(modules, states, str(checkpoint.root))
    tokenizer = Tokenizer.from_file(checkpoint.path(ckpt.TOKENIZER_FILE), config.gpt.num_text_tokens)
    placed_device, placed_dtype = _finish(modules, device, dtype, quant)
    logger.info(
        "loaded checkpoint %s (%s)", checkpoint.root, "official" if checkpoint.is_official_release else "custom"
    )
    return ChatTTSModel(
        config=config,
        modules=modules,
        tokenizer=tokenizer,
        speaker_stats=_stats(config),
        fingerprint=checkpoint.fingerprint(),
        is_dummy=False,
        device=placed_device,
        dtype=placed_dtype,
    )


def _stats(config: ModelConfig) -> SpeakerStats:
    if config.spk_stat:
        return SpeakerStats.from_string(config.spk_stat, config.gpt.hidden_size)
    return SpeakerStats.official(config.gpt.hidden_size)


def _load_dummy(source: ModelSource, *, device: str, dtype: str, quant: str) -> ChatTTSModel:
    config = SIZES[source.dummy_size]
    modules = ChatTTSModules(config)
    _populate(modules, dummy_state_dicts(config, source.dummy_seed), f"dummy-{source.dummy_size}")
    tokenizer = Tokenizer.from_json(tokenizer_json(config.gpt.num_text_tokens), config.gpt.num_text_tokens)
    stats = SpeakerStats.from_string(spk_stat_string(config.gpt.hidden_size, source.dummy_seed))
    placed_device, placed_dtype = _finish(modules, device, dtype, quant)
    fingerprint = hashlib.sha256(f"dummy:{source.dummy_size}:{source.dummy_seed}".encode()).hexdigest()[:16]
    logger.warning("using random %s weights: the audio is noise (for tests and benchmarks only)", source.dummy_size)
    return ChatTTSModel(
        config=config,
        modules=modules,
        tokenizer=tokenizer,
        speaker_stats=stats,
        fingerprint=fingerprint,
        is_dummy=True,
        device=placed_device,
        dtype=placed_dtype,
    )


def _load_sealed(source: ModelSource, *, device: str, dtype: str, quant: str) -> ChatTTSModel:
    """Decrypt and verify in memory: no plaintext weight file is ever written."""
    from turbotts.guard.seal import aes_key_from_env, load_public_key, load_sealed_state_dicts

    assert source.checkpoint is not None and source.sealed_key_env is not None and source.public_key is not None
    states, files = load_sealed_state_dicts(
        source.checkpoint, aes_key_from_env(source.sealed_key_env), load_public_key(source.public_key)
    )
    config = _sealed_config(files)
    modules = ChatTTSModules(config)
    _populate(modules, states, f"sealed:{source.checkpoint}")
    tokenizer = Tokenizer.from_json(files[ckpt.TOKENIZER_FILE].decode("utf-8"), config.gpt.num_text_tokens)
    placed_device, placed_dtype = _finish(modules, device, dtype, quant)
    manifest = (Path(source.checkpoint) / "manifest.json").read_bytes()
    return ChatTTSModel(
        config=config,
        modules=modules,
        tokenizer=tokenizer,
        speaker_stats=_stats(config),
        fingerprint=hashlib.sha256(manifest).hexdigest()[:16],
        is_dummy=False,
        device=placed_device,
        dtype=placed_dtype,
    )


def _sealed_config(files: dict[str, bytes]) -> ModelConfig:
    root_json = json.loads(files[ckpt.ROOT_CONFIG_FILE]) if ckpt.ROOT_CONFIG_FILE in files else None
    return model_config_from_dict(root_json, json.loads(files[ckpt.GPT_CONFIG_FILE]))


def speaker_stats_for(source: ModelSource) -> SpeakerStats:
    """The speaker statistics of a source without loading its weights."""
    if source.is_dummy:
        hidden_size = SIZES[source.dummy_size].gpt.hidden_size
        return SpeakerStats.from_string(spk_stat_string(hidden_size, source.dummy_seed))
    if source.checkpoint is None:
        return SpeakerStats.official()
    if source.sealed_key_env is not None and source.public_key is not None:
        from turbotts.guard.seal import aes_key_from_env, load_public_key, open_sealed

        key = aes_key_from_env(source.sealed_key_env)
        files = open_sealed(source.checkpoint, key, load_public_key(source.public_key))
        return _stats(_sealed_config(files))
    _refuse_sealed_without_key(Path(source.checkpoint))
    checkpoint = ckpt.open_checkpoint(source.checkpoint, verify=False)
    return _stats(checkpoint.model_config())
