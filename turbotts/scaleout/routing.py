"""The routing key of a request and the rendezvous hash that maps it to a replica.

The key is what the audio cache keys on, as far as the ingress can see it without
the model: voice, seed and the text of the first segment (the same sanitizer and
segmenter the service uses). Two requests with the same key would hit the same
cache entries, so they should land on the same replica's in-process L1. Requests
without a seed are never cached (a seed is drawn per request), so they get no key
and go to the least-loaded replica. No Ray here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from turbotts.errors import TurboTTSError
from turbotts.text.segmenter import split_input
from turbotts.text.utterances import Utterance

SPEECH_PATH = "/v1/audio/speech"


def routing_key(path: str, body: bytes, max_segment_chars: int) -> str | None:
    """The cache-affinity key of a speech request; None when it has no seed or is not speech."""
    if path != SPEECH_PATH or not body:
        return None
    try:
        fields: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None  # the replica answers the 400
    if not isinstance(fields, dict) or fields.get("seed") is None or not isinstance(fields.get("input"), str):
        return None
    try:  # the segments the replica will synthesize (and cache), from the one segmenter
        items = split_input(fields["input"], max_segment_chars=max_segment_chars)
    except TurboTTSError:
        items = []  # the replica answers the 400
    first = next((item.text for item in items if isinstance(item, Utterance)), "")
    voice = fields.get("voice")
    return json.dumps([str(voice), str(fields["seed"]), first], ensure_ascii=False)


def _score(key: str, replica: str) -> int:
    digest = hashlib.blake2b(f"{replica}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(key: str, replicas: Iterable[str]) -> list[str]:
    """``replicas`` from most to least preferred for ``key`` (highest random weight first).

    Why rendezvous and not a ring: when a replica leaves, only its keys move, and
    the next choice for each key is already the second entry of this list.
    """
    return sorted(replicas, key=lambda replica: _score(key, replica), reverse=True)
