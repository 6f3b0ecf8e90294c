"""Sealed checkpoints as bytes in, bytes out: encrypt and sign, verify and decrypt.

Why: the weights are the asset. Each file is encrypted with AES-256-GCM (a random
96-bit nonce per file, the relative path as associated data, so files cannot be
swapped or renamed), and a manifest lists, per file, the SHA-256 of the plaintext
and of the sealed bytes. The manifest is signed with Ed25519, so whoever opens it
knows the set of files, not only each file, is the one that was sealed.
:func:`open_sealed` checks the signature first, then every digest. No torch, no
model and no file system here: :mod:`turbotts.guard.sealed_dir` reads and writes
directories, and the caller decides which files make a checkpoint.

Layout of a sealed directory::

    manifest.json   {"format": "turbotts-sealed-v1", "key_sha256": ..., "files": {rel: {...}}}
    manifest.sig    64-byte Ed25519 signature of manifest.json, byte for byte
    manifest.pub    the signer's public key (PEM), for information only: trust the key you are given
    <rel>.sealed    nonce (12 bytes) || AES-GCM ciphertext and tag, for each file <rel>
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turbotts.errors import CheckpointError
from turbotts.guard.keys import KEY_BYTES, public_key_pem

SEALED_FORMAT = "turbotts-sealed-v1"
PLAIN_FORMAT = "turbotts-plain-v1"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig"
PUBLIC_KEY_FILE = "manifest.pub"
SEALED_SUFFIX = ".sealed"
NONCE_BYTES = 12
MAX_FILE_BYTES = (1 << 31) - 1 - 16  # one AES-GCM call; the official GPT weights are ~0.9 GB
_AAD_PREFIX = b"turbotts-seal-v1:"

#: Reads one file of a directory by relative path; None when it does not exist.
ReadFile = Callable[[str], bytes | None]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key_id(key: bytes) -> str:
    return sha256_hex(b"turbotts-key-id:" + key)


def _check_key(key: bytes) -> None:
    if len(key) != KEY_BYTES:
        raise CheckpointError(
            f"the checkpoint key must be {KEY_BYTES} bytes, not {len(key)}; generate one with `openssl rand -hex 32`"
        )


def _signed(manifest: dict[str, Any], signing_key: Ed25519PrivateKey) -> dict[str, bytes]:
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    return {MANIFEST_FILE: body, SIGNATURE_FILE: signing_key.sign(body), PUBLIC_KEY_FILE: public_key_pem(signing_key)}


def seal_files(files: Mapping[str, bytes], key: bytes, signing_key: Ed25519PrivateKey) -> dict[str, bytes]:
    """Encrypt every file and sign the manifest: relative path -> bytes of the sealed directory.

    Raises:
        CheckpointError: the key is not 32 bytes, or a file is over 2 GiB.
    """
    _check_key(key)
    aead = AESGCM(key)
    out: dict[str, bytes] = {}
    entries: dict[str, dict[str, Any]] = {}
    for relative, plaintext in files.items():
        if len(plaintext) > MAX_FILE_BYTES:
            raise CheckpointError(f"{relative} is over 2 GiB, which one AES-GCM seal cannot hold; split the weights")
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + aead.encrypt(nonce, plaintext, _AAD_PREFIX + relative.encode())
        out[relative + SEALED_SUFFIX] = sealed
        entries[relative] = {
            "sha256": sha256_hex(plaintext),
            "sealed_sha256": sha256_hex(sealed),
            "size": len(plaintext),
        }
    manifest = {"format": SEALED_FORMAT, "key_sha256": _key_id(key), "files": entries}
    return {**out, **_signed(manifest, signing_key)}


def verified_manifest(read: ReadFile, public_key: Ed25519PublicKey, expected_format: str, where: str) -> dict[str, Any]:
    """The manifest, refused unless its signature holds (checked before parsing)."""
    body, signature = read(MANIFEST_FILE), read(SIGNATURE_FILE)
    if body is None:
        raise CheckpointError(f"{where}/{MANIFEST_FILE} is missing; seal the checkpoint again with `turbotts seal`")
    if signature is None:
        raise CheckpointError(
            f"{where}/{SIGNATURE_FILE} is missing: {where}/{MANIFEST_FILE} is unsigned and will not be trusted; "
            "seal the checkpoint again with the signing key"
        )
    try:
        public_key.verify(signature, body)
    except InvalidSignature as exc:
        raise CheckpointError(
            f"{where}/{MANIFEST_FILE} does not match its signature {where}/{SIGNATURE_FILE}: it was altered, or "
            "signed by another key; check the public key or seal again"
        ) from exc
    manifest = json.loads(body)
    if manifest.get("format") != expected_format:
        raise CheckpointError(
            f"{where}/{MANIFEST_FILE} has format {manifest.get('format')!r}, expected {expected_format!r}"
        )
    return dict(manifest)


def open_sealed(read: ReadFile, key: bytes, public_key: Ed25519PublicKey, where: str) -> dict[str, bytes]:
    """Verify and decrypt a sealed directory into memory: relative path -> plaintext bytes.

    Raises:
        CheckpointError: the manifest is unsigned or its signature fails, the key
            is not the sealing key, or a file is missing, truncated, tampered or
            renamed (the message names it, inside ``where``).
    """
    _check_key(key)
    manifest = verified_manifest(read, public_key, SEALED_FORMAT, where)
    if manifest.get("key_sha256") != _key_id(key):
        raise CheckpointError(
            f"{where}/{MANIFEST_FILE} says the checkpoint was sealed with another AES key; "
            "set the key it was sealed with"
        )
    aead = AESGCM(key)
    files: dict[str, bytes] = {}
    for relative, entry in manifest["files"].items():
        sealed_name = f"{where}/{relative}{SEALED_SUFFIX}"
        sealed = read(relative + SEALED_SUFFIX)
        if sealed is None:
            raise CheckpointError(f"{sealed_name} is missing from the sealed checkpoint; copy the whole directory")
        if sha256_hex(sealed) != entry["sealed_sha256"]:
            raise CheckpointError(
                f"{sealed_name} does not match the signed manifest (tampered or truncated: "
                f"{len(sealed)} bytes); copy it again from the sealed original"
            )
        try:
            plaintext = aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _AAD_PREFIX + relative.encode())
        except InvalidTag as exc:
            raise CheckpointError(
                f"{sealed_name} fails authentication; it is corrupt or not sealed with this key"
            ) from exc
        if sha256_hex(plaintext) != entry["sha256"]:
            raise CheckpointError(f"{sealed_name} decrypts to content whose SHA-256 is not the signed one")
        files[relative] = plaintext
    return files


def sign_digests(digests: Mapping[str, tuple[str, int]], signing_key: Ed25519PrivateKey) -> dict[str, bytes]:
    """The signed manifest of a plain checkpoint from ``{relative: (sha256, size)}``: the files to write."""
    entries = {rel: {"sha256": digest, "size": size} for rel, (digest, size) in digests.items()}
    return _signed({"format": PLAIN_FORMAT, "files": entries}, signing_key)


def plain_manifest_entries(read: ReadFile, public_key: Ed25519PublicKey, where: str) -> dict[str, tuple[str, int]]:
    """What a signed plain manifest promises, ``{relative: (sha256, size)}``, once its signature holds."""
    manifest = verified_manifest(read, public_key, PLAIN_FORMAT, where)
    return {rel: (entry["sha256"], entry["size"]) for rel, entry in manifest["files"].items()}
