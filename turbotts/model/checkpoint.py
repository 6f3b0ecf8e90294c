"""Where the files of a checkpoint live and whether they are intact.

The layout is the official 2Noise/ChatTTS release. When a directory claims to be
that release (it has no root ``config.json`` of its own), every file must match
the published SHA-256; a verified directory is remembered in a small stamp file
so the ~1 GB is hashed once, not at every start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turbotts.config import ModelConfig, model_config_from_dict
from turbotts.digests import file_sha256
from turbotts.errors import CheckpointError

VOCOS_FILE = "asset/Vocos.safetensors"
DVAE_FILE = "asset/DVAE.safetensors"
DECODER_FILE = "asset/Decoder.safetensors"
EMBED_FILE = "asset/Embed.safetensors"
GPT_CONFIG_FILE = "asset/gpt/config.json"
GPT_WEIGHTS_FILE = "asset/gpt/model.safetensors"
TOKENIZER_DIR = "asset/tokenizer"
TOKENIZER_FILE = "asset/tokenizer/tokenizer.json"
ROOT_CONFIG_FILE = "config.json"
VERIFIED_STAMP = ".turbotts-verified.json"

REQUIRED_FILES = (VOCOS_FILE, DVAE_FILE, DECODER_FILE, EMBED_FILE, GPT_CONFIG_FILE, GPT_WEIGHTS_FILE, TOKENIZER_FILE)

# Published digests of the official release (0.2.x layout).
OFFICIAL_SHA256 = {
    DECODER_FILE: "77aa55e0a977949c4733df3c6f876fa85860d3298cba63295a7bc6901729d4e0",
    DVAE_FILE: "1d0b044a8368c0513100a2eca98456b289e6be6a18b7a63be1bcaa315ea874d9",
    EMBED_FILE: "2ff0be7134934155741b643b74e32fb6bf3eec41257984459b2ed60cdb4c48b0",
    VOCOS_FILE: "07e5561491cce41f7f90cfdb94b2ff263ff5742c3d89339db99b17ad82cc3f44",
    GPT_CONFIG_FILE: "0aaa1ecd96c49ad4f473459eb1982fa7ad79fa5de08cde2781bf6ad1f9a0c236",
    GPT_WEIGHTS_FILE: "cd0806fd971f52f6a22c923ec64982b305e817bcc41ca83417fcf9141b984a0f",
    "asset/tokenizer/special_tokens_map.json": "bd0ac9d9bb1657996b5c5fbcaa7d80f8de530d01a283da97f89deae5b1b8d011",
    "asset/tokenizer/tokenizer_config.json": "43e9d658b554fa5ee8d8e1d763349323bfef1ed7a89c0794220ab8861387d421",
    TOKENIZER_FILE: "843838a64e121e23e774cc75874c6fe862198d9f7dd43747914633a8fd89c20e",
}


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory whose required files exist."""

    root: Path

    def path(self, relative: str) -> Path:
        return self.root / relative

    @property
    def is_official_release(self) -> bool:
        """A directory without its own root config.json claims the official dimensions."""
        return not self.path(ROOT_CONFIG_FILE).exists()

    def read_json(self, relative: str) -> dict[str, Any] | None:
        path = self.path(relative)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path} is not valid JSON ({exc}); restore the file or download again") from exc
        if not isinstance(data, dict):
            raise CheckpointError(f"{path} must hold a JSON object")
        return data

    def model_config(self) -> ModelConfig:
        return model_config_from_dict(self.read_json(ROOT_CONFIG_FILE), self.read_json(GPT_CONFIG_FILE))

    def fingerprint(self) -> str:
        """Identifies the weights (sizes and mtimes), e.g. for cache keys."""
        digest = hashlib.sha256()
        for relative in REQUIRED_FILES:
            stat = self.path(relative).stat()
            digest.update(f"{relative}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:16]


def checkpoint_file_list(root: Path) -> list[str]:
    """The files that make a checkpoint (to seal or sign): the root config and everything under ``asset/``."""
    files = [ROOT_CONFIG_FILE] if (root / ROOT_CONFIG_FILE).is_file() else []
    files += sorted(p.relative_to(root).as_posix() for p in (root / "asset").rglob("*") if p.is_file())
    return files


def open_checkpoint(root: str | Path, *, verify: bool = True) -> Checkpoint:
    """Check that ``root`` holds a loadable checkpoint.

    Raises:
        CheckpointError: a required file is missing, or an official file's digest
            does not match the published one (naming the file).
    """
    checkpoint = Checkpoint(Path(root).expanduser().resolve())
    if not checkpoint.root.is_dir():
        raise CheckpointError(
            f"checkpoint directory {checkpoint.root} does not exist; run `turbotts download --dir DIR` "
            "or `turbotts init-checkpoint DIR --size tiny` first"
        )
    missing = [rel for rel in REQUIRED_FILES if not checkpoint.path(rel).is_file()]
    if missing:
        raise CheckpointError(
            f"checkpoint {checkpoint.root} lacks {', '.join(missing)}; it must follow the 2Noise/ChatTTS layout"
        )
    if verify and checkpoint.is_official_release:
        verify_official_digests(checkpoint)
    return checkpoint


def _stamp_key(checkpoint: Checkpoint, relative: str) -> str:
    stat = checkpoint.path(relative).stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def verify_official_digests(checkpoint: Checkpoint) -> None:
    """Compare every official file with its published SHA-256 (once per file version)."""
    stamp_path = checkpoint.path(VERIFIED_STAMP)
    try:
        stamp: dict[str, str] = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
    except (OSError, json.JSONDecodeError):
        stamp = {}
    changed = False
    for relative, expected in OFFICIAL_SHA256.items():
        path = checkpoint.path(relative)
        if not path.is_file():
            continue  # optional tokenizer side files; REQUIRED_FILES were checked already
        key = _stamp_key(checkpoint, relative)
        if stamp.get(relative) == key:
            continue
        actual = file_sha256(path)
        if actual != expected:
            raise CheckpointError(
                f"{path} has SHA-256 {actual}, but the official release has {expected}; the file is corrupt "
                "or not the official one. Download it again (`turbotts download`), or add a root config.json "
                "if this is a custom checkpoint"
            )
        stamp[relative] = key
        changed = True
    if changed:
        with contextlib.suppress(OSError):  # a read-only checkpoint is verified again next time
            stamp_path.write_text(json.dumps(stamp, indent=1))
