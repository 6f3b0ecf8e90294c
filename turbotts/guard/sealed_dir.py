"""Sealed and signed checkpoints on disk: the directory side of :mod:`turbotts.guard.seal`.

The caller names the files that make a checkpoint (the model's layout is not
known here); this module only reads, writes and verifies them. Plaintext of a
sealed checkpoint is never written to disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from turbotts.digests import file_sha256
from turbotts.errors import CheckpointError
from turbotts.guard.seal import (
    MANIFEST_FILE,
    SEALED_FORMAT,
    ReadFile,
    open_sealed,
    plain_manifest_entries,
    seal_files,
    sign_digests,
)


def directory_reader(root: Path) -> ReadFile:
    """Reads files under ``root`` by relative path (None when absent); refuses paths that leave it."""

    def read(relative: str) -> bytes | None:
        path = (root / relative).resolve()
        if root not in path.parents:
            raise CheckpointError(f"{relative!r} points outside {root}; the manifest is not a checkpoint's")
        return path.read_bytes() if path.is_file() else None

    return read


def _write(target: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def seal_directory(
    source: Path, target: Path, relatives: Iterable[str], key: bytes, signing_key: Ed25519PrivateKey
) -> Path:
    """Seal the named files of ``source`` into ``target``; returns the signed manifest's path.

    Raises:
        CheckpointError: ``target`` is inside ``source``, a bad key, or a file over 2 GiB.
    """
    source, target = source.expanduser().resolve(), target.expanduser().resolve()
    if target == source or source in target.parents:
        raise CheckpointError(f"{target} is inside the checkpoint {source}; seal into a separate directory")
    _write(target, seal_files({rel: (source / rel).read_bytes() for rel in relatives}, key, signing_key))
    return target / MANIFEST_FILE


def open_sealed_directory(directory: Path, key: bytes, public_key: Ed25519PublicKey) -> dict[str, bytes]:
    """Verify and decrypt a sealed directory into memory (see :func:`turbotts.guard.seal.open_sealed`)."""
    root = directory.expanduser().resolve()
    return open_sealed(directory_reader(root), key, public_key, str(root))


def is_sealed_directory(directory: Path) -> bool:
    try:
        manifest = json.loads((directory.expanduser() / MANIFEST_FILE).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == SEALED_FORMAT


def sealed_fingerprint(directory: Path) -> str:
    """Identifies a sealed checkpoint (its signed manifest), e.g. for cache keys."""
    return hashlib.sha256((directory.expanduser() / MANIFEST_FILE).read_bytes()).hexdigest()[:16]


def write_plain_manifest(root: Path, relatives: Iterable[str], signing_key: Ed25519PrivateKey) -> Path:
    """Sign a plain (unencrypted) checkpoint in place, for :func:`verify_plain_manifest`."""
    root = root.expanduser().resolve()
    digests = {rel: (file_sha256(root / rel), (root / rel).stat().st_size) for rel in relatives}
    _write(root, sign_digests(digests, signing_key))
    return root / MANIFEST_FILE


def verify_plain_manifest(root: Path, public_key: Ed25519PublicKey) -> bool:
    """Check a plain checkpoint against its signed manifest, when it has one.

    Returns:
        False when the directory has no ``manifest.json`` (nothing to check);
        True when the signature and every listed file's SHA-256 match.

    Raises:
        CheckpointError: unsigned or badly signed manifest, or a missing or changed file (named).
    """
    root = root.expanduser().resolve()
    if not (root / MANIFEST_FILE).is_file():
        return False
    for relative, (digest, size) in plain_manifest_entries(directory_reader(root), public_key, str(root)).items():
        path = root / relative
        if not path.is_file():
            raise CheckpointError(f"{path} is listed in the signed manifest but missing; restore it")
        if path.stat().st_size != size or file_sha256(path) != digest:
            raise CheckpointError(f"{path} differs from the signed manifest (tampered or truncated); restore it")
    return True
