"""Optional bearer-token authentication.

Keys come from a file (one per line, ``#`` starts a comment) and/or an
environment variable (comma separated). Only their SHA-256 hashes are kept, so
a memory dump or a debug print of the store reveals no usable key. A
presented token is hashed and compared with every stored hash by
:func:`hmac.compare_digest`, without stopping at the first match, so timing
reveals neither which key matched nor how much of it did.

A successful check returns a key id, ``key_`` plus the first 12 hex digits of
the hash: stable, safe to log, and the natural rate-limit key. With no keys
configured, authentication is off (:attr:`APIKeyStore.is_enabled`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from turbotts.errors import InvalidInputError

DEFAULT_ENV_VAR = "TURBOTTS_API_KEYS"
KEY_ID_HEX_DIGITS = 12


def hash_key(token: str) -> str:
    """The SHA-256 hex digest of a key, the only form in which keys are stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def key_id(key_hash: str) -> str:
    """The public id of a key, from its hash: safe to log and to use as a rate-limit key."""
    return "key_" + key_hash[:KEY_ID_HEX_DIGITS]


def parse_key_file(text: str) -> list[str]:
    """Keys in a key file's text: one per line, blank lines and ``#`` comments ignored."""
    keys = []
    for line in text.splitlines():
        key = line.split("#", 1)[0].strip()
        if key:
            keys.append(key)
    return keys


def parse_key_list(value: str) -> list[str]:
    """Keys in a comma-separated list (the environment variable form)."""
    return [key.strip() for key in value.split(",") if key.strip()]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None if absent or another scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class APIKeyStore:
    """The accepted keys, as hashes; immutable once built."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        """Hash and keep ``keys`` (plain text); the plain text is not kept.

        Raises:
            InvalidInputError: a key contains whitespace or a comma (it could not be
                written in the file or environment form, so it is surely a mistake).
        """
        hashes = []
        for key in keys:
            if any(c.isspace() or c == "," for c in key) or not key:
                raise InvalidInputError("an API key is empty or contains whitespace or a comma; fix the key source")
            hashes.append(hash_key(key))
        self._hashes: tuple[bytes, ...] = tuple(sorted({bytes.fromhex(h) for h in hashes}))

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        env_var: str = DEFAULT_ENV_VAR,
        environ: Mapping[str, str] | None = None,
    ) -> APIKeyStore:
        """Keys from a file and/or an environment variable (the union of both).

        Args:
            path: a key file; None = no file.
            env_var: the variable holding comma-separated keys; unset or empty = none.
            environ: the environment to read (default ``os.environ``; inject a dict in tests).

        Raises:
            InvalidInputError: the file cannot be read, or holds no key (an empty file
                would silently switch authentication off).
        """
        keys: list[str] = []
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise InvalidInputError(
                    f"cannot read the API key file {path}: {exc}; fix the path or permissions"
                ) from exc
            file_keys = parse_key_file(text)
            if not file_keys:
                raise InvalidInputError(
                    f"the API key file {path} holds no key; add one per line, or unset the file to disable auth"
                )
            keys.extend(file_keys)
        env = os.environ if environ is None else environ
        keys.extend(parse_key_list(env.get(env_var, "")))
        return cls(keys)

    @property
    def is_enabled(self) -> bool:
        """Whether any key is configured (otherwise every request is let through)."""
        return bool(self._hashes)

    @property
    def num_keys(self) -> int:
        return len(self._hashes)

    def verify(self, token: str | None) -> str | None:
        """The key id of ``token`` if it is an accepted key, else None.

        Every stored hash is compared, in constant time each, whatever matches.
        With authentication disabled this returns None too: check :attr:`is_enabled` first.
        """
        if token is None:
            return None
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        match: bytes | None = None
        for stored in self._hashes:
            if hmac.compare_digest(presented, stored):
                match = stored
        return None if match is None else key_id(match.hex())
