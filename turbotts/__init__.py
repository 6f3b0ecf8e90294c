"""TurboTTS: production serving for ChatTTS.

Public API: :class:`TTS` (load once, synthesize batches), :class:`ModelSource`,
the parameter objects and the exception tree.
"""

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
from turbotts.model.loader import ModelSource
from turbotts.params import SamplingParams, SynthesisParams

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
]
