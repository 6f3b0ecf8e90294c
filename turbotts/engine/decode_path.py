"""Which code paths a decode step takes on this device: the sampler, the attention strategy, the KV cache dtype.

Chosen once, when the runner is built, from the device, the GPT's weights and the CPU switches, so the
runner's step code never asks what hardware it runs on.
"""

from __future__ import annotations

import logging
from types import ModuleType

import torch

from turbotts.cpu import int8_gemv
from turbotts.cpu.extensions import load_sampler
from turbotts.cpu.quant import is_quantized
from turbotts.cpu.settings import SWITCHES, cpu_settings
from turbotts.model.attention_metadata import DecodeStrategy
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.gpt import GPT

#: ``TURBOTTS_FUSED_SAMPLER=0`` samples with torch ops even where the compiled kernels are loaded (for A/B runs)
FUSED_SAMPLER_ENV = SWITCHES["fused_sampler"][0]

logger = logging.getLogger(__name__)


def sampling_kernel(model: ChatTTSModel) -> ModuleType | None:
    """The compiled sampler: for an int8 GPT on CPU (its steps are short enough for the torch
    sampler's fixed per-step overhead to count), where the int8 kernels load too, unless switched off."""
    if not cpu_settings().fused_sampler or model.device.type != "cpu":
        return None
    if not is_quantized(model.modules.gpt):
        return None
    if int8_gemv.load_kernel() is None:
        return None
    kernel = load_sampler().module
    if kernel is not None:
        logger.info("sampling on the compiled CPU kernels (%s=0 samples with torch ops)", FUSED_SAMPLER_ENV)
    return kernel


def decode_strategy(device: torch.device) -> DecodeStrategy:
    """GATHER on CUDA (shapes that depend only on the batch, as kernels and graphs like), else AUTO (no copies)."""
    return DecodeStrategy.GATHER if device.type == "cuda" else DecodeStrategy.AUTO


def kv_cache_dtype(name: str, gpt: GPT) -> torch.dtype:
    """The KV cache's storage dtype for ``EngineConfig.kv_dtype``.

    ``auto`` is bf16 where the fused int8 decode stack runs (CPU, int8 weights, fp32 activations):
    at 16 rows and 150 cached tokens the fp32 cache is more bytes per step than the int8 weights,
    and int8 already trades exactness for speed; elsewhere the cache keeps the GPT's dtype.
    """
    if name == "fp32":
        return torch.float32
    if name == "bf16":
        return torch.bfloat16
    if name != "auto":
        raise ValueError(f"kv_dtype must be auto, fp32 or bf16, not {name!r}")
    return torch.bfloat16 if gpt.fused_decode is not None else gpt.norm.weight.dtype


def resolve_decode_mode(mode: str, device_type: str) -> str:
    """``auto`` means CUDA graphs on a GPU and per-slot eager attention on CPU."""
    if mode == "auto":
        return "graphs" if device_type == "cuda" else "eager"
    return mode
