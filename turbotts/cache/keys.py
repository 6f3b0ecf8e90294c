"""Cache keys for synthesized audio.

A key is the SHA-256 of a canonical JSON document that holds everything that
changes the output bytes: the text (Unicode-normalized, whitespace collapsed),
every field of :class:`~turbotts.params.SynthesisParams` (voice, seeds, both
sampling passes, prompts, flags), the response format, any extra
output-shaping fields the server adds, and the model fingerprint (so a new
checkpoint never serves old audio). Canonical means sorted keys, no
insignificant whitespace and a version number, so two processes, or two
replicas, always compute the same key for the same request.

Only deterministic requests can be cached: without a seed the sampler draws a
fresh one, and returning a stored clip would silently remove the variety the
caller asked for. :func:`is_cacheable` says so, and :func:`cache_key` refuses
anything else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping

from turbotts.errors import InvalidInputError
from turbotts.params import SynthesisParams

# Bump when the document layout below changes, so old entries stop matching.
KEY_SCHEMA_VERSION = 1
DEFAULT_KEY_PREFIX = "tts"

ExtraValue = str | int | float | bool | None

_WHITESPACE = re.compile(r"\s+")


def normalize_text_for_key(text: str) -> str:
    """Fold spellings of the same text into one key.

    NFC makes composed and decomposed accents equal, and collapsing runs of
    whitespace (and trimming the ends) matches what the text front end does
    anyway. Case and punctuation are kept: both change the audio.
    """
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def is_cacheable(params: SynthesisParams) -> bool:
    """Whether a request's audio may be served from (and stored in) the cache.

    Only requests with a fixed ``seed`` produce the same audio every time.
    """
    return params.seed is not None


def canonical_request_json(
    text: str,
    params: SynthesisParams,
    *,
    response_format: str,
    model_fingerprint: str,
    extra: Mapping[str, ExtraValue] | None = None,
) -> str:
    """The canonical JSON document that :func:`cache_key` hashes (exposed for debugging).

    A reference clip enters as its digest only, so the document (which may be logged
    while debugging) never holds the clip's codes or transcript.
    """
    fields = dataclasses.asdict(params)  # nested SamplingParams become dicts, tuples lists
    if params.reference is not None:
        fields["reference"] = {"sha256": params.reference.digest}
    document = {
        "v": KEY_SCHEMA_VERSION,
        "text": normalize_text_for_key(text),
        "params": fields,
        "format": response_format.lower(),
        "model": model_fingerprint,
        "extra": dict(extra or {}),
    }
    # allow_nan=False: NaN would never equal itself across processes; params validation excludes it anyway.
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(
    text: str,
    params: SynthesisParams,
    *,
    response_format: str,
    model_fingerprint: str,
    extra: Mapping[str, ExtraValue] | None = None,
) -> str:
    """The 64-hex-digit SHA-256 key of one deterministic request.

    Args:
        text: the request text as the user sent it (normalized here).
        params: the validated synthesis parameters; ``seed`` must be set.
        response_format: the audio container, e.g. ``"wav"`` or ``"mp3"``.
        model_fingerprint: identifies the weights (e.g. a checkpoint hash) and
            anything else global that changes the audio.
        extra: further output-shaping request fields (speed, sample rate, ...),
            JSON scalars only.

    Returns:
        The lowercase hex digest.

    Raises:
        InvalidInputError: the request has no seed (check :func:`is_cacheable`
            first), or the fingerprint is empty.
    """
    if not is_cacheable(params):
        raise InvalidInputError("only requests with a seed can be cached; check is_cacheable() before cache_key()")
    if not model_fingerprint:
        raise InvalidInputError("model_fingerprint is empty; pass a checkpoint hash so new weights miss old audio")
    document = canonical_request_json(
        text, params, response_format=response_format, model_fingerprint=model_fingerprint, extra=extra
    )
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


def redis_key(key: str, prefix: str = DEFAULT_KEY_PREFIX) -> str:
    """The Redis key of a cache key: ``tts:{h[:2]}:{h}``.

    The two-hex-digit bucket spreads keys over 256 prefixes, which keeps
    ``SCAN MATCH tts:ab:*`` style maintenance cheap and lets a cluster setup
    shard by prefix.
    """
    return f"{prefix}:{key[:2]}:{key}"
