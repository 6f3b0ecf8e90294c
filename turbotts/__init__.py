"""TurboTTS: production serving for ChatTTS.

Public API: :class:`TTS` (load once, synthesize batches), :class:`ModelSource`,
the parameter objects and the exception tree. Names are imported lazily, so
torch-free parts (the scheduler, the KV allocator) can be imported without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "TTS": "turbotts.api",
    "CodeResult": "turbotts.api",
    "EngineConfig": "turbotts.config",
    "ModelConfig": "turbotts.config",
    "StreamingConfig": "turbotts.config",
    "CheckpointError": "turbotts.errors",
    "DownloadError": "turbotts.errors",
    "EngineError": "turbotts.errors",
    "InvalidInputError": "turbotts.errors",
    "QueueFullError": "turbotts.errors",
    "TurboTTSError": "turbotts.errors",
    "VoiceError": "turbotts.errors",
    "ModelSource": "turbotts.sources",
    "SamplingParams": "turbotts.params",
    "SynthesisParams": "turbotts.params",
    "VoiceReference": "turbotts.params",
}
__all__ = [
    "TTS",
    "CheckpointError",
    "CodeResult",
    "DownloadError",
    "EngineConfig",
    "EngineError",
    "InvalidInputError",
    "ModelConfig",
    "ModelSource",
    "QueueFullError",
    "SamplingParams",
    "StreamingConfig",
    "SynthesisParams",
    "TurboTTSError",
    "VoiceError",
    "VoiceReference",
]

if TYPE_CHECKING:
    from turbotts.api import TTS, CodeResult
    from turbotts.config import EngineConfig, ModelConfig, StreamingConfig
    from turbotts.errors import (
        CheckpointError,
        DownloadError,
        EngineError,
        InvalidInputError,
        QueueFullError,
        TurboTTSError,
        VoiceError,
    )
    from turbotts.params import SamplingParams, SynthesisParams, VoiceReference
    from turbotts.sources import ModelSource


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'turbotts' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
