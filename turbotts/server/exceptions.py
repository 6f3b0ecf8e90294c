"""Errors only the HTTP service raises, as part of the tree in :mod:`turbotts.errors`::

    InvalidInputError
    ├── InputTooLongError     the input is longer than the server accepts (413)
    ├── UnknownModelError     a model name the server does not serve (404)
    ├── VoiceNotFoundError    no built-in or saved voice has this name (404)
    └── VoiceExistsError      a voice with this name is already saved (409)
    TurboTTSError
    └── AuthenticationError   no or a wrong bearer key (401)

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


class AuthenticationError(TurboTTSError):
    """The request carries no valid API key."""
