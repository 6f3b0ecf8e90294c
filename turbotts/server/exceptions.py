"""Errors only the HTTP service raises, as part of the tree in :mod:`turbotts.errors`::

    InvalidInputError
    ├── InputTooLongError     the input is longer than the server accepts (413)
    ├── UnknownModelError     a model name the server does not serve (404)
    ├── VoiceNotFoundError    no built-in or saved voice has this name (404)
    ├── VoiceExistsError      a voice with this name is already saved (409)
    └── UnsupportedFrameError a binary WebSocket frame where JSON text belongs (close 1003)
    TurboTTSError
    ├── AuthenticationError   no or a wrong bearer key (401)
    ├── RateLimitedError      this client or key is over its rate limit (429 + Retry-After)
    └── OverloadedError       admission control refuses new work for now (503 + Retry-After)
    (ContentFilteredError, an InvalidInputError of turbotts.guard.content_filter, is 400 content_filtered)

No FastAPI here: :mod:`turbotts.server.errors` maps them to HTTP.
"""

from __future__ import annotations

from turbotts.errors import InvalidInputError, TurboTTSError


class InputTooLongError(InvalidInputError):
    """The input text exceeds ``max_input_chars``."""


class UnknownModelError(InvalidInputError):
    """The request names a model this server does not serve."""


class VoiceNotFoundError(InvalidInputError):
    """The voice name is neither built in nor saved."""


class VoiceExistsError(InvalidInputError):
    """A saved voice already has this name."""


class UnsupportedFrameError(InvalidInputError):
    """A WebSocket frame of a kind the protocol does not use (binary)."""


class AuthenticationError(TurboTTSError):
    """The request carries no valid API key."""


class RateLimitedError(TurboTTSError):
    """The caller's token bucket is empty; ``retry_after_s`` says when it holds a token again."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class OverloadedError(TurboTTSError):
    """Admission control refuses new work (``reason`` is one of ``turbotts.guard.admission.REASONS``)."""

    def __init__(self, message: str, reason: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s
