"""Fetch the official 2Noise/ChatTTS release with huggingface_hub."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from turbotts.errors import CheckpointError, DownloadError
from turbotts.model.checkpoint import OFFICIAL_SHA256, Checkpoint, open_checkpoint

REPO_ID = "2Noise/ChatTTS"
DEFAULT_DIR = Path(os.environ.get("TURBOTTS_HOME", "~/.cache/turbotts")).expanduser() / "ChatTTS"
ALLOW_PATTERNS = sorted(OFFICIAL_SHA256)
CONNECT_TIMEOUT_S = 10.0


def download_official(target_dir: str | Path | None = None, *, revision: str | None = None) -> Checkpoint:
    """Download (or reuse) the official weights into ``target_dir`` and verify them.

    Raises:
        DownloadError: the hub is unreachable or refused the request; the message
            says how to run on dummy weights or a local checkpoint instead.
    """
    target = Path(target_dir).expanduser() if target_dir else DEFAULT_DIR
    with contextlib.suppress(CheckpointError):  # not there yet, or damaged: fetch it
        return open_checkpoint(target)
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(int(CONNECT_TIMEOUT_S)))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(int(CONNECT_TIMEOUT_S)))
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(
            repo_id=REPO_ID,
            revision=revision,
            local_dir=str(target),
            allow_patterns=ALLOW_PATTERNS,
        )
    except Exception as exc:
        raise DownloadError(
            f"could not download {REPO_ID} from the Hugging Face hub ({type(exc).__name__}: {exc}).\n"
            "To run without the hub:\n"
            "  - random weights in the official layout: add `--load-format dummy --dummy-size tiny` "
            "(or `full` for benchmark-size weights);\n"
            "  - a local copy of the release: pass `--checkpoint DIR` (DIR holds asset/...)."
        ) from exc
    return open_checkpoint(target)
