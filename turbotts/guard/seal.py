"""Sealed checkpoints: weights encrypted at rest, signed, and opened only in memory.

Why: the weights are the asset. A sealed directory holds each file of the
checkpoint encrypted with AES-256-GCM (a random 96-bit nonce per file, the
relative path as associated data, so files cannot be swapped or renamed), and a
``manifest.json`` that lists, per file, the SHA-256 of the plaintext and of the
sealed bytes. The manifest is signed with Ed25519 (``manifest.sig``), so whoever
loads it knows the set of files, not only each file, is the one that was sealed.
:func:`open_sealed` checks the signature first, then every digest, and never
writes plaintext to disk.

Layout of a sealed directory::

    manifest.json   {"format": "turbotts-sealed-v1", "key_sha256": ..., "files": {rel: {...}}}
    manifest.sig    64-byte Ed25519 signature of manifest.json, byte for byte
    manifest.pub    the signer's public key (PEM), for information only: trust the key you are given
    <rel>.sealed    nonce (12 bytes) || AES-GCM ciphertext and tag, for each file <rel>
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turbotts.errors import CheckpointError
from turbotts.model import checkpoint as ckpt

if TYPE_CHECKING:
    import torch

SEALED_FORMAT = "turbotts-sealed-v1"
PLAIN_FORMAT = "turbotts-plain-v1"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig"
PUBLIC_KEY_FILE = "manifest.pub"
SEALED_SUFFIX = ".sealed"
NONCE_BYTES = 12
KEY_BYTES = 32
_MAX_FILE_BYTES = (1 << 31) - 1 - 16  # one AES-GCM call; the official GPT weights are ~0.9 GB
_AAD_PREFIX = b"turbotts-seal-v1:"


def checkpoint_files(root: Path) -> list[str]:
    """The files to seal or sign: the root config and everything under ``asset/``, as POSIX paths."""
    files = [ckpt.ROOT_CONFIG_FILE] if (root / ckpt.ROOT_CONFIG_FILE).is_file() else []
    asset = root / "asset"
    files += sorted(p.relative_to(root).as_posix() for p in asset.rglob("*") if p.is_file())
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_key(key: bytes) -> None:
    if len(key) != KEY_BYTES:
        raise CheckpointError(
            f"the checkpoint key must be {KEY_BYTES} bytes, not {len(key)}; generate one with `openssl rand -hex 32`"
        )


def _sign(directory: Path, manifest: dict[str, Any], signing_key: Ed25519PrivateKey) -> None:
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    (directory / MANIFEST_FILE).write_bytes(body)
    (directory / SIGNATURE_FILE).write_bytes(signing_key.sign(body))
    public = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (directory / PUBLIC_KEY_FILE).write_bytes(public)


def seal_checkpoint(src_dir: str | Path, out_dir: str | Path, key: bytes, signing_key: Ed25519PrivateKey) -> Path:
    """Encrypt and sign every file of the checkpoint in ``src_dir`` into ``out_dir``.

    Returns:
        The path of the signed manifest.

    Raises:
        CheckpointError: ``src_dir`` is not a valid checkpoint, the key is not
            32 bytes, ``out_dir`` is inside ``src_dir``, or a file is over 2 GiB.
    """
    _check_key(key)
    source = ckpt.open_checkpoint(src_dir).root
    target = Path(out_dir).expanduser().resolve()
    if target == source or source in target.parents:
        raise CheckpointError(f"{target} is inside the checkpoint {source}; seal into a separate directory")
    aead = AESGCM(key)
    entries: dict[str, dict[str, Any]] = {}
    for relative in checkpoint_files(source):
        plaintext = (source / relative).read_bytes()
        if len(plaintext) > _MAX_FILE_BYTES:
            raise CheckpointError(f"{relative} is over 2 GiB, which one AES-GCM seal cannot hold; split the weights")
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + aead.encrypt(nonce, plaintext, _AAD_PREFIX + relative.encode())
        sealed_path = target / (relative + SEALED_SUFFIX)
        sealed_path.parent.mkdir(parents=True, exist_ok=True)
        sealed_path.write_bytes(sealed)
        entries[relative] = {"sha256": _sha256(plaintext), "sealed_sha256": _sha256(sealed), "size": len(plaintext)}
    manifest = {"format": SEALED_FORMAT, "key_sha256": _sha256(b"turbotts-key-id:" + key), "files": entries}
    _sign(target, manifest, signing_key)
    return target / MANIFEST_FILE


def _verified_manifest(directory: Path, public_key: Ed25519PublicKey, expected_format: str) -> dict[str, Any]:
    """Read the manifest, refusing it unless the signature holds (checked before parsing)."""
    manifest_path, signature_path = directory / MANIFEST_FILE, directory / SIGNATURE_FILE
    if not manifest_path.is_file():
        raise CheckpointError(f"{manifest_path} is missing; seal the checkpoint again with `turbotts seal`")
    if not signature_path.is_file():
        raise CheckpointError(
            f"{signature_path} is missing: {manifest_path} is unsigned and will not be trusted; "
            "seal the checkpoint again with the signing key"
        )
    body = manifest_path.read_bytes()
    try:
        public_key.verify(signature_path.read_bytes(), body)
    except InvalidSignature as exc:
        raise CheckpointError(
            f"{manifest_path} does not match its signature {signature_path}: it was altered, or "
            "signed by another key; check the public key or seal again"
        ) from exc
    manifest = json.loads(body)
    if manifest.get("format") != expected_format:
        raise CheckpointError(f"{manifest_path} has format {manifest.get('format')!r}, expected {expected_format!r}")
    return dict(manifest)


def open_sealed(out_dir: str | Path, key: bytes, public_key: Ed25519PublicKey) -> dict[str, bytes]:
    """Verify and decrypt a sealed checkpoint into memory: relative path -> plaintext bytes.

    Raises:
        CheckpointError: the manifest is unsigned or its signature fails, the key
            is not the sealing key, or a file is missing, truncated, tampered or
            renamed (the message names it).
    """
    _check_key(key)
    directory = Path(out_dir).expanduser().resolve()
    manifest = _verified_manifest(directory, public_key, SEALED_FORMAT)
    if manifest.get("key_sha256") != _sha256(b"turbotts-key-id:" + key):
        raise CheckpointError(
            f"{directory / MANIFEST_FILE} says the checkpoint was sealed with another AES key; "
            "set the key it was sealed with"
        )
    aead = AESGCM(key)
    files: dict[str, bytes] = {}
    for relative, entry in manifest["files"].items():
        sealed_path = directory / (relative + SEALED_SUFFIX)
        if not sealed_path.is_file():
            raise CheckpointError(f"{sealed_path} is missing from the sealed checkpoint; copy the whole directory")
        sealed = sealed_path.read_bytes()
        if _sha256(sealed) != entry["sealed_sha256"]:
            raise CheckpointError(
                f"{sealed_path} does not match the signed manifest (tampered or truncated: "
                f"{len(sealed)} bytes); copy it again from the sealed original"
            )
        try:
            plaintext = aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _AAD_PREFIX + relative.encode())
        except InvalidTag as exc:
            raise CheckpointError(
                f"{sealed_path} fails authentication; it is corrupt or not sealed with this key"
            ) from exc
        if _sha256(plaintext) != entry["sha256"]:
            raise CheckpointError(f"{sealed_path} decrypts to content whose SHA-256 is not the signed one")
        files[relative] = plaintext
    return files


def load_sealed_state_dicts(
    out_dir: str | Path, key: bytes, public_key: Ed25519PublicKey
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, bytes]]:
    """What the loader needs from a sealed checkpoint, without plaintext on disk.

    Returns:
        The state dicts of every ``*.safetensors`` file (loaded from bytes), and
        the other files (configs, tokenizer) as bytes, both keyed by relative path.
    """
    from safetensors.torch import load as load_safetensors

    files = open_sealed(out_dir, key, public_key)
    missing = [rel for rel in ckpt.REQUIRED_FILES if rel not in files]
    if missing:
        raise CheckpointError(f"the sealed checkpoint {out_dir} lacks {', '.join(missing)}; seal a complete checkpoint")
    states: dict[str, dict[str, torch.Tensor]] = {}
    for relative in [rel for rel in files if rel.endswith(".safetensors")]:
        try:
            states[relative] = load_safetensors(files.pop(relative))
        except Exception as exc:  # safetensors raises its own SafetensorError and others
            raise CheckpointError(f"{out_dir}/{relative} is not a readable safetensors file ({exc})") from exc
    return states, files


def write_plain_manifest(directory: str | Path, signing_key: Ed25519PrivateKey) -> Path:
    """Sign a plain (unencrypted) checkpoint in place, for :func:`verify_plain_manifest`."""
    root = ckpt.open_checkpoint(directory, verify=False).root
    entries = {
        rel: {"sha256": ckpt.sha256_of(root / rel), "size": (root / rel).stat().st_size}
        for rel in checkpoint_files(root)
    }
    _sign(root, {"format": PLAIN_FORMAT, "files": entries}, signing_key)
    return root / MANIFEST_FILE


def verify_plain_manifest(directory: str | Path, public_key: Ed25519PublicKey) -> bool:
    """Check a plain checkpoint against its signed manifest, when it has one.

    Returns:
        False when the directory has no ``manifest.json`` (nothing to check);
        True when the signature and every listed file's SHA-256 match.

    Raises:
        CheckpointError: unsigned or badly signed manifest, or a missing or
            changed file (named).
    """
    root = Path(directory).expanduser().resolve()
    if not (root / MANIFEST_FILE).is_file():
        return False
    manifest = _verified_manifest(root, public_key, PLAIN_FORMAT)
    for relative, entry in manifest["files"].items():
        path = root / relative
        if not path.is_file():
            raise CheckpointError(f"{path} is listed in the signed manifest but missing; restore it")
        if path.stat().st_size != entry["size"] or ckpt.sha256_of(path) != entry["sha256"]:
            raise CheckpointError(f"{path} differs from the signed manifest (tampered or truncated); restore it")
    return True


def aes_key_from_env(var: str) -> bytes:
    """The 32-byte AES key held in environment variable ``var`` as hex or base64.

    Raises:
        CheckpointError: the variable is unset or does not decode to 32 bytes.
    """
    value = os.environ.get(var, "").strip()
    if not value:
        raise CheckpointError(
            f"environment variable {var} is not set; put a 32-byte key in it as hex "
            f"(`export {var}=$(openssl rand -hex 32)`) or base64"
        )
    try:
        key = bytes.fromhex(value) if len(value) == 2 * KEY_BYTES else base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise CheckpointError(f"{var} is neither 64 hex digits nor base64; use `openssl rand -hex 32`") from exc
    if len(key) != KEY_BYTES:
        raise CheckpointError(f"{var} decodes to {len(key)} bytes; the key must be {KEY_BYTES} bytes")
    return key


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
    public_key_path(pem_path).write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return key, True


def public_key_path(signing_key_path: Path) -> Path:
    return signing_key_path.with_name(signing_key_path.name + ".pub")


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (``manifest.pub`` or ``<signing key>.pub``)."""
    try:
        key = serialization.load_pem_public_key(Path(path).expanduser().read_bytes())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the public key {path} ({exc}); pass the signer's PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def seal_command(checkpoint: str | Path, out: str | Path, key_env: str, signing_key_path: str | Path) -> int:
    """``turbotts seal CHECKPOINT OUT --key-env VAR --signing-key PEM``; returns the exit code.

    Raises:
        CheckpointError: bad checkpoint, key or signing key (the CLI prints it).
    """
    key = aes_key_from_env(key_env)
    signing_key, created = load_or_create_signing_key(signing_key_path)
    if created:
        print(
            f"created a new Ed25519 signing key at {signing_key_path} (mode 0600; keep it secret) and its "
            f"public key at {public_key_path(Path(signing_key_path))}"
        )
    manifest = seal_checkpoint(checkpoint, out, key, signing_key)
    public = public_key_path(Path(signing_key_path))
    print(f"sealed {checkpoint} into {manifest.parent}; signed manifest {manifest}")
    print(f"serve it (the key stays in ${key_env}): turbotts serve --checkpoint {manifest.parent} "
          f"--key-env {key_env} --public-key {public}")  # fmt: skip
    return 0


def sign_command(checkpoint: str | Path, signing_key_path: str | Path) -> int:
    """``turbotts sign CHECKPOINT --signing-key PEM``: sign a plain checkpoint in place; returns the exit code."""
    signing_key, created = load_or_create_signing_key(signing_key_path)
    public = public_key_path(Path(signing_key_path))
    if created:
        print(f"created a new Ed25519 signing key at {signing_key_path} (mode 0600; keep it secret) and {public}")
    manifest = write_plain_manifest(checkpoint, signing_key)
    print(f"signed {checkpoint}: {manifest}; loaders verify it with --public-key {public}")
    return 0
