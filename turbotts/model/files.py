"""One way in for a checkpoint's files: the loader reads every kind through this interface.

Why: a checkpoint can be a plain directory, dummy (random) weights made in memory,
or a sealed directory decrypted in memory; the model is assembled the same way
from each (:func:`turbotts.model.loader.build_model`). Who picks the kind is the
caller (:mod:`turbotts.sources`), so the model never knows about keys or seals.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

import torch
from safetensors.torch import load, load_file

from turbotts.errors import CheckpointError
from turbotts.model.checkpoint import Checkpoint


class CheckpointFiles(Protocol):
    """Read access to the files of one checkpoint, by path relative to its root (``asset/Vocos.safetensors``)."""

    @property
    def origin(self) -> str:
        """Where the files come from, for messages: a directory, ``sealed:DIR`` or ``dummy-tiny``."""
        ...

    @property
    def is_dummy(self) -> bool: ...

    def has(self, relative: str) -> bool: ...

    def read(self, relative: str) -> bytes:
        """The file's bytes. Raises CheckpointError (naming it) when it is missing."""
        ...

    def tensors(self, relative: str) -> dict[str, torch.Tensor]:
        """A safetensors file's tensors. Raises CheckpointError when it is missing or unreadable."""
        ...

    def fingerprint(self) -> str:
        """Identifies the weights, e.g. for cache keys (16 hex digits)."""
        ...


@dataclass(frozen=True)
class DirectoryFiles:
    """A plain checkpoint directory (already checked by :func:`turbotts.model.checkpoint.open_checkpoint`)."""

    checkpoint: Checkpoint
    is_dummy: bool = False

    @property
    def origin(self) -> str:
        return str(self.checkpoint.root)

    def has(self, relative: str) -> bool:
        return self.checkpoint.path(relative).is_file()

    def read(self, relative: str) -> bytes:
        path = self.checkpoint.path(relative)
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; it must follow the 2Noise/ChatTTS layout")
        return path.read_bytes()

    def tensors(self, relative: str) -> dict[str, torch.Tensor]:
        path = self.checkpoint.path(relative)
        try:
            return load_file(str(path))  # memory-mapped: no second copy of the weights
        except Exception as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file ({exc}); download it again") from exc

    def fingerprint(self) -> str:
        return self.checkpoint.fingerprint()


@dataclass(frozen=True)
class MemoryFiles:
    """Files held in memory, such as a sealed checkpoint decrypted without touching the disk."""

    files: dict[str, bytes]
    origin: str
    fingerprint_hex: str = ""
    is_dummy: bool = False

    def has(self, relative: str) -> bool:
        return relative in self.files

    def read(self, relative: str) -> bytes:
        if relative not in self.files:
            raise CheckpointError(f"{self.origin} lacks {relative}; seal a complete checkpoint")
        return self.files[relative]

    def tensors(self, relative: str) -> dict[str, torch.Tensor]:
        data = self.read(relative)
        try:
            return load(data)
        except Exception as exc:
            raise CheckpointError(f"{self.origin}/{relative} is not a readable safetensors file ({exc})") from exc

    def fingerprint(self) -> str:
        if self.fingerprint_hex:
            return self.fingerprint_hex
        digest = hashlib.sha256()
        for relative in sorted(self.files):
            digest.update(relative.encode() + hashlib.sha256(self.files[relative]).digest())
        return digest.hexdigest()[:16]
