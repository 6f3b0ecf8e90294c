"""bf16 copies of the audio decoders (Decoder, DVAE, Vocos) for the bf16 vocoder.

Why: under autocast every Linear and Conv casts its fp32 weight to bf16 on every
call, so a call reads 6 bytes per weight (4 to cast, 2 to multiply) where 2 would
do. A streamed chunk is a few dozen frames, so the call is bound by those weight
reads, not by its arithmetic: one chunk decode streamed 217 MB of fp32 weights.
Cast once, a lone stream's first chunk (12 frames) took 23.6 ms instead of 48.6,
a 124-frame window 64 ms instead of 93 (2-core Xeon, ``amx``). The outputs are
bit for bit autocast's, which rounds the same weights the same way; norms and
other float tensors stay fp32 and are shared with the original, not copied.

The fp32 weights' pages are handed back once copied (:func:`page_out`): mapped
from the checkpoint they return from the file if the fp32 modules ever run again.
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
from turbotts.model.file_views import page_out
from turbotts.model.vocos import Vocos

ModuleT = TypeVar("ModuleT", bound=nn.Module)

#: the layers whose weights autocast casts on every call
CAST_LAYERS = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.Conv2d)


class AudioDecoders(NamedTuple):
    decoder: HiddenDecoder
    dvae: DVAE
    vocos: Vocos


_copies: weakref.WeakKeyDictionary[ChatTTSModules, AudioDecoders] = weakref.WeakKeyDictionary()


def with_bf16_weights(module: ModuleT) -> ModuleT:
    """A copy of ``module`` whose Linear/Conv weights and biases are bf16; every other tensor is shared."""
    memo: dict[int, object] = {}
    for layer in module.modules():
        if isinstance(layer, CAST_LAYERS):
            for param in (layer.weight, layer.bias):
                if param is not None and param.dtype == torch.float32:
                    memo[id(param)] = nn.Parameter(param.detach().to(torch.bfloat16), requires_grad=False)
                    page_out(param)
    for tensor in [*module.parameters(), *module.buffers()]:
        memo.setdefault(id(tensor), tensor)  # shared, not copied
    return copy.deepcopy(module, memo)


def bf16_audio_decoders(modules: ChatTTSModules) -> AudioDecoders:
    """The decoders with bf16 weights, made once per loaded model and shared by its engines."""
    cached = _copies.get(modules)
    if cached is None:
        cached = AudioDecoders(
            with_bf16_weights(modules.decoder), with_bf16_weights(modules.dvae), with_bf16_weights(modules.vocos)
        )
        _copies[modules] = cached
    return cached
