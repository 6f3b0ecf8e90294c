"""Assemble a :class:`ChatTTSModel` from a checkpoint's files, whatever kind they are.

Every weight file is loaded with shape checks and strict key matching, so a
checkpoint of the wrong size or layout fails here with the file's name, not
later inside a matmul. Which files to read (a directory, dummy weights, a
sealed checkpoint) is the caller's choice: see :mod:`turbotts.sources`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from turbotts.config import ModelConfig, model_config_from_dict
from turbotts.errors import CheckpointError
from turbotts.model import checkpoint as ckpt
from turbotts.model.chattts import ChatTTSModel, ChatTTSModules
from turbotts.model.embed import fold_weight_norm
from turbotts.model.file_views import FileViews, libc, own_leftover_file_views, spill_to_disk
from turbotts.model.files import CheckpointFiles
from turbotts.model.layers import Fusable
from turbotts.model.speaker import SpeakerStats
from turbotts.model.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: swaps the GPT's linears for faster ones after placement (int8 on CPU: :func:`turbotts.cpu.quant.quantize_gpt`)
Speedup = Callable[[ChatTTSModules], None]


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
    # modules built on the meta device take the checkpoint's tensors as they are
    is_deferred = any(t.is_meta for t in module.state_dict().values())
    module.load_state_dict(state, strict=True, assign=is_deferred)


def _populate(modules: ChatTTSModules, files: CheckpointFiles) -> list[FileViews]:
    """Load each weight file into its module, one file at a time (peak memory: one file);
    returns what each file's tensors are, for :func:`own_leftover_file_views` after conversion."""
    targets: dict[str, nn.Module] = {
        ckpt.GPT_WEIGHTS_FILE: modules.gpt,
        ckpt.EMBED_FILE: modules.embed,
        ckpt.DECODER_FILE: modules.decoder,
        ckpt.DVAE_FILE: modules.dvae,
        ckpt.VOCOS_FILE: modules.vocos,
    }
    views = []
    for relative, module in targets.items():
        state = files.tensors(relative)
        views.append(FileViews.of(state))
        if relative == ckpt.EMBED_FILE:
            state = fold_weight_norm(state)
        _load_strict(module, state, f"{files.origin}/{relative}")
    return views


def release_freed_memory() -> None:
    """Hand the heap that loading freed back to the OS (glibc keeps it otherwise).

    Loading frees many weight-sized blocks (file buffers, weight-norm halves,
    float copies replaced by bf16 or int8); without a trim they stay resident for
    the process's life, hundreds of MB on the full model.
    """
    trim = getattr(libc(), "malloc_trim", None)  # absent outside glibc: nothing to trim
    if trim is not None:
        trim(0)


def _place(
    modules: ChatTTSModules, device: str, dtype: str, speedup: Speedup | None
) -> tuple[torch.device, torch.dtype]:
    """Place the modules; only the GPT and its embeddings/heads take ``dtype`` and ``speedup``."""
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
    if speedup is not None:
        speedup(modules)
    else:
        # one matmul for q/k/v, gate/up and the 4 code heads, prepacked for oneDNN on CPU:
        # a small-batch decode step reads each input once and makes fewer, larger matmul calls
        # (the unfused weights stay the source of truth)
        modules.gpt.fuse()
        modules.embed.fuse()
    release_freed_memory()
    return target, DTYPES[dtype]


def _fused_sources(modules: ChatTTSModules) -> list[nn.Parameter]:
    """The linears' weights that fused matmuls replace while they are fused (read again only if unfused)."""
    return [
        cast(nn.Parameter, linear.weight)
        for root in (modules.gpt, modules.embed)
        for fusable in root.modules()
        if isinstance(fusable, Fusable) and fusable.is_fused
        for linear in fusable.modules()
        if isinstance(linear, nn.Linear)
    ]


def _json(files: CheckpointFiles, relative: str) -> dict[str, Any] | None:
    if not files.has(relative):
        return None
    try:
        data = json.loads(files.read(relative))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{files.origin}/{relative} is not valid JSON ({exc}); restore the file") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{files.origin}/{relative} must hold a JSON object")
    return data


def model_config_of(files: CheckpointFiles) -> ModelConfig:
    """The config: the root config.json when there is one (a custom checkpoint), else the official sizes."""
    return model_config_from_dict(_json(files, ckpt.ROOT_CONFIG_FILE), _json(files, ckpt.GPT_CONFIG_FILE))


def speaker_stats_of(config: ModelConfig) -> SpeakerStats:
    """The speaker statistics a checkpoint carries in its config, or the official ones."""
    if config.spk_stat:
        return SpeakerStats.from_string(config.spk_stat, config.gpt.hidden_size)
    return SpeakerStats.official(config.gpt.hidden_size)


def build_model(
    files: CheckpointFiles, *, device: str = "cpu", dtype: str = "fp32", speedup: Speedup | None = None
) -> ChatTTSModel:
    """The one place a :class:`ChatTTSModel` is assembled: config, weights, tokenizer, speaker statistics.

    Raises:
        CheckpointError: a file is missing, unreadable or of the wrong shape (named), or a bad
            device or dtype.
    """
    config = model_config_of(files)
    modules = ChatTTSModules(config, defer_gpt_weights=True)
    views = _populate(modules, files)
    release_freed_memory()
    tokenizer_json = files.read(ckpt.TOKENIZER_FILE).decode("utf-8")
    tokenizer = Tokenizer.from_json(tokenizer_json, config.gpt.num_text_tokens)
    placed_device, placed_dtype = _place(modules, device, dtype, speedup)
    own_leftover_file_views(modules, views)
    if placed_device.type == "cpu" and placed_dtype != torch.float32 and speedup is None:
        spill_to_disk(_fused_sources(modules))  # bf16 copies: not file pages, the kernel could not drop them
    del views
    if files.is_dummy:
        logger.warning("using random %s weights: the audio is noise (for tests and benchmarks only)", files.origin)
    else:
        logger.info("loaded checkpoint %s", files.origin)
    return ChatTTSModel(
        config=config,
        modules=modules,
        tokenizer=tokenizer,
        speaker_stats=speaker_stats_of(config),
        fingerprint=files.fingerprint(),
        is_dummy=files.is_dummy,
        device=placed_device,
        dtype=placed_dtype,
    )
