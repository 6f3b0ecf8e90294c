"""``turbotts seal`` and ``turbotts sign``: the model's layout names the files, the guard seals or signs them."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from turbotts.guard.keys import load_or_create_signing_key, public_key_path, secret_key_from_env
from turbotts.guard.sealed_dir import seal_directory, write_plain_manifest
from turbotts.model import checkpoint as ckpt


def _signing_key(path: Path) -> Ed25519PrivateKey:
    signing_key, created = load_or_create_signing_key(path)
    if created:
        print(f"created a new Ed25519 signing key at {path} (mode 0600; keep it secret) and {public_key_path(path)}")
    return signing_key


def seal_command(checkpoint: Path, out: Path, key_env: str, signing_key_path: Path) -> int:
    """Encrypt and sign a plain checkpoint into ``out``; prints the command that serves it. Returns the exit code.

    Raises:
        CheckpointError: bad checkpoint, key or signing key (the CLI prints it).
    """
    key = secret_key_from_env(key_env)
    root = ckpt.open_checkpoint(checkpoint).root
    manifest = seal_directory(root, out, ckpt.checkpoint_file_list(root), key, _signing_key(signing_key_path))
    public = public_key_path(signing_key_path)
    print(f"sealed {checkpoint} into {manifest.parent}; signed manifest {manifest}")
    print(f"serve it (the key stays in ${key_env}): turbotts serve --checkpoint {manifest.parent} "
          f"--key-env {key_env} --public-key {public}")  # fmt: skip
    return 0


def sign_command(checkpoint: Path, signing_key_path: Path) -> int:
    """Sign a plain checkpoint in place (manifest.json + manifest.sig); returns the exit code."""
    root = ckpt.open_checkpoint(checkpoint, verify=False).root
    manifest = write_plain_manifest(root, ckpt.checkpoint_file_list(root), _signing_key(signing_key_path))
    print(f"signed {checkpoint}: {manifest}; loaders verify it with --public-key {public_key_path(signing_key_path)}")
    return 0
