"""The exception tree of TurboTTS.

Every error a user can cause or fix derives from :class:`TurboTTSError`, and its
message says what happened and what to do::

    TurboTTSError
    ├── CheckpointError        weights missing, malformed, tampered or the wrong shape
    │   └── DownloadError      the model hub could not be reached
    ├── MissingDependencyError an optional package is not installed (the message has the pip command)
    ├── InvalidInputError      bad text, voice string or parameter (also a ValueError)
    │   └── VoiceError         a voice string that cannot be decoded
    └── EngineError            the engine cannot take or finish work
        ├── QueueFullError     the waiting queue is full: retry later
        └── RequestCancelledError  the request was cancelled before it finished

The server maps these to HTTP statuses in one place (``server/errors.py``).
"""

from __future__ import annotations


class TurboTTSError(Exception):
    """Base of every error TurboTTS raises on purpose."""


class CheckpointError(TurboTTSError):
    """The checkpoint cannot be used as it is."""


class DownloadError(CheckpointError):
    """Fetching the official weights failed."""


class MissingDependencyError(TurboTTSError):
    """A feature needs an optional package that is not installed."""


class InvalidInputError(TurboTTSError, ValueError):
    """The caller passed something we cannot synthesize."""


class VoiceError(InvalidInputError):
    """A voice (speaker) string could not be decoded."""


class EngineError(TurboTTSError):
    """The engine could not accept or complete a request."""


class QueueFullError(EngineError):
    """The waiting queue is at capacity; the caller should retry later."""


class RequestCancelledError(EngineError):
    """The request was cancelled (for example, the client went away)."""
