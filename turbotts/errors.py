"""The exception tree of TurboTTS: every error raised on purpose, in one place.

Every error a user can cause or fix derives from :class:`TurboTTSError`, and its
message says what happened and what to do::

    TurboTTSError
    ├── CheckpointError            weights missing, malformed, tampered or the wrong shape
    │   └── DownloadError          the model hub could not be reached
    ├── MissingDependencyError     an optional package is not installed (the message has the pip command)
    ├── InvalidInputError          bad text, voice string or parameter (also a ValueError)          400
    │   ├── VoiceError             a voice string that cannot be decoded                            400
    │   ├── AudioReadError         a file that cannot be decoded as audio                           400
    │   │   └── ReferenceAudioError  a reference clip that is empty, undecodable, too short or long  400
    │   ├── ReferenceTooLargeError a reference clip upload over the size limit                      413
    │   ├── VoiceMixError          a voice mix that cannot be parsed or mixes a reference voice     400
    │   ├── SSMLError              SSML not well-formed or outside the subset (element, position)   400
    │   ├── ContentFilteredError   the text contains a blocked term                                 400
    │   ├── InputTooLongError      the input is longer than the server accepts                      413
    │   ├── UnknownModelError      a model name the server does not serve                           404
    │   ├── VoiceNotFoundError     no built-in or saved voice has this name                         404
    │   ├── VoiceExistsError       a voice with this name is already saved                          409
    │   └── UnsupportedFrameError  a binary WebSocket frame where JSON text belongs (close 1003), 400
    ├── IdleTimeoutError           a WebSocket client sent nothing for ws_idle_timeout_s (close 4008) 408
    ├── AuthenticationError        no or a wrong bearer key                                         401
    ├── RateLimitedError           this client or key is over its rate limit                        429
    ├── OverloadedError            admission control refuses new work for now                       503
    │   └── StreamCapacityError    no real-time stream slot within max_queue_wait_s                 503
    ├── ServiceUnavailableError    a shared store or a replica did not answer: retry                503
    └── EngineError                the engine cannot take or finish work                            500
        ├── QueueFullError         the waiting queue is full: retry later                           503
        └── RequestCancelledError  the request was cancelled before it finished

The HTTP statuses on the right are mapped in one place, ``server/web/errors.py``; nothing
here knows about HTTP.
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


class AudioReadError(InvalidInputError):
    """A file could not be decoded as audio."""


class ReferenceAudioError(AudioReadError):
    """A reference clip cannot become a voice (``param`` names the form field at fault)."""

    def __init__(self, message: str, param: str = "audio") -> None:
        super().__init__(message)
        self.param = param


class ReferenceTooLargeError(InvalidInputError):
    """A reference clip upload is larger than ``max_reference_bytes``."""

    param = "audio"


class VoiceMixError(InvalidInputError):
    """A voice mix such as ``alloy*0.7+nova*0.3`` that cannot be parsed or resolved."""

    param = "voice"


class SSMLError(InvalidInputError):
    """SSML input that is not well-formed, or uses markup outside the supported subset.

    ``element`` names the element at fault (None when the document has none yet),
    ``line`` and ``column`` (1-based) where the parser stood; the message says both.
    """

    param = "input"

    def __init__(self, message: str, element: str | None = None, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.element = element
        self.line = line
        self.column = column


class ContentFilteredError(InvalidInputError):
    """The text contains a blocked term (``term``, as written in the blocklist)."""

    def __init__(self, term: str) -> None:
        super().__init__(f"the text contains a blocked term ({term!r}); rephrase it and try again")
        self.term = term


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


class IdleTimeoutError(TurboTTSError):
    """No client message and no audio sent for ``ws_idle_timeout_s``: the connection is closed."""


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


class StreamCapacityError(OverloadedError):
    """The engine would keep a new stream queued longer than ``max_queue_wait_s`` (real-time admission).

    ``retry_after_s`` is the estimated time until the queue wait is back under the limit.
    """

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message, "realtime", retry_after_s)


class ServiceUnavailableError(TurboTTSError):
    """Something the request needs beyond this process (the shared voice store, a replica) did not answer."""

    retry_after_s = 1.0


class EngineError(TurboTTSError):
    """The engine could not accept or complete a request."""


class QueueFullError(EngineError):
    """The waiting queue is at capacity; the caller should retry later."""


class RequestCancelledError(EngineError):
    """The request was cancelled (for example, the client went away)."""
