"""bf16 copies of the audio decoders (Decoder, DVAE, Vocos) for the bf16 vocoder.

Why: under autocast every Linear and Conv casts its fp32 weight to bf16 on every
call, so a call reads 6 bytes per weight (4 to cast, 2 to multiply) where 2 would
do. A streamed chunk is a few dozen frames, so the call is bound by those weight
reads, not by its arithmetic: one chunk decode streamed 217 MB of fp32 weights.
Cast once, each call reads a third of those bytes, so a chunk decodes markedly
faster, short windows (a lone stream's first chunk) most of all. The outputs are
bit for bit autocast's, which rounds the same weights the same way; norms and
other float tensors stay fp32 and are shared with the original, not copied.

Memory: the fp32 weights the copies replace (217 MB at full size, on the heap:
the loader copies these modules' weights in) move to an unlinked temporary file's
mapping, paged out (:func:`spill_to_disk`), and come back from it only if the fp32
modules run again; the bf16 copies take half that (109 MB).
"""

from __future__ import annotations

import copy
import weakref
from typing import NamedTuple, TypeVar

import torch
from torch import nn

from turbotts.model.chattts import ChatTTSModules
from turbotts.model.decoder import HiddenDecoder
from turbotts.model.dvae import DVAE
from turbotts.model.file_views import spill_to_disk
from turbotts.model.vocos import Vocos

ModuleT = TypeVar("ModuleT", bound=nn.Module)

#: the layers whose weights autocast casts on every call
CAST_LAYERS = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.Conv2d)


class AudioDecoders(NamedTuple):
    decoder: HiddenDecoder
    dvae: DVAE
    vocos: Vocos


_copies: weakref.WeakKeyDictionary[ChatTTSModules, AudioDecoders] = weakref.WeakKeyDictionary()


def cast_sources(module: nn.Module) -> list[nn.Parameter]:
    """The fp32 weights and biases of ``module``'s Linear and Conv layers: what a bf16 copy replaces."""
    layers = [layer for layer in module.modules() if isinstance(layer, CAST_LAYERS)]
    params = [p for layer in layers for p in layer.parameters(recurse=False)]
    return [p for p in params if p.dtype == torch.float32]


def with_bf16_weights(module: ModuleT) -> ModuleT:
    """A copy of ``module`` whose Linear/Conv weights and biases are bf16; every other tensor is shared."""
    memo: dict[int, object] = {
        id(param): nn.Parameter(param.detach().to(torch.bfloat16), requires_grad=False)
        for param in cast_sources(module)
    }
    for tensor in [*module.parameters(), *module.buffers()]:
        memo.setdefault(id(tensor), tensor)  # shared, not copied
    return copy.deepcopy(module, memo)


def bf16_audio_decoders(modules: ChatTTSModules) -> AudioDecoders:
    """The decoders with bf16 weights, made once per loaded model and shared by its engines."""
    cached = _copies.get(modules)
    if cached is None:
        originals = AudioDecoders(modules.decoder, modules.dvae, modules.vocos)
        cached = AudioDecoders(
            with_bf16_weights(originals.decoder), with_bf16_weights(originals.dvae), with_bf16_weights(originals.vocos)
        )
        spill_to_disk([param for module in originals for param in cast_sources(module)])
        _copies[modules] = cached
    return cached
