"""Key material in one place: 32-byte secret keys (checkpoint sealing, watermarks) and Ed25519 keys.

Why one module: the seal, the watermark and the server settings all take the same
32-byte keys as hex or base64, and the same messages should tell a user how to make one.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from turbotts.errors import CheckpointError, InvalidInputError

KEY_BYTES = 32
MAKE_ONE = "make one with `openssl rand -hex 32`"


def parse_secret_key(value: str, what: str) -> bytes:
    """A 32-byte key written as 64 hex digits or as base64.

    Raises:
        InvalidInputError: the text decodes to something else (``what`` names where it came from).
    """
    text = value.strip()
    try:
        key = bytes.fromhex(text) if len(text) == 2 * KEY_BYTES else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise InvalidInputError(f"{what} is neither 64 hex digits nor base64; {MAKE_ONE}") from exc
    if len(key) != KEY_BYTES:
        raise InvalidInputError(f"{what} decodes to {len(key)} bytes; the key must be {KEY_BYTES} bytes ({MAKE_ONE})")
    return key


def secret_key_from_env(var: str) -> bytes:
    """The 32-byte key held in environment variable ``var`` (hex or base64).

    Raises:
        CheckpointError: the variable is unset or does not hold a 32-byte key.
    """
    value = os.environ.get(var, "").strip()
    if not value:
        raise CheckpointError(
            f"environment variable {var} is not set; put a 32-byte key in it as hex "
            f"(`export {var}=$(openssl rand -hex 32)`) or base64"
        )
    try:
        return parse_secret_key(value, var)
    except InvalidInputError as exc:
        raise CheckpointError(str(exc)) from exc


def public_key_path(signing_key_path: Path) -> Path:
    """Where the public half of a signing key is written: ``<key>.pub``."""
    return signing_key_path.with_name(signing_key_path.name + ".pub")


def public_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_or_create_signing_key(path: str | Path) -> tuple[Ed25519PrivateKey, bool]:
    """The Ed25519 key in PEM file ``path``, created (mode 0600, with ``.pub`` beside it) when absent.

    Returns:
        The key, and whether it was created now.
    """
    pem_path = Path(path).expanduser()
    if pem_path.is_file():
        try:
            key = serialization.load_pem_private_key(pem_path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{pem_path} is not an unencrypted PEM private key ({exc})") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise CheckpointError(f"{pem_path} holds a {type(key).__name__}; the signing key must be Ed25519")
        return key, False
    key = Ed25519PrivateKey.generate()
    pem_path.parent.mkdir(parents=True, exist_ok=True)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(pem_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_key_path(pem_path).write_bytes(public_key_pem(key))
    return key, True


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (``manifest.pub`` or ``<signing key>.pub``)."""
    try:
        key = serialization.load_pem_public_key(Path(path).expanduser().read_bytes())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the public key {path} ({exc}); pass the signer's PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key
