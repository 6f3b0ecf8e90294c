"""Access to the golden outputs of the official package (copied from the shared
fixtures into tests/fixtures; tests never read outside the repository)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

FIXTURE_DIR = Path(__file__).parent / "fixtures" / "chattts-tiny"


@cache
def cases() -> dict[str, Any]:
    return json.loads((FIXTURE_DIR / "cases.json").read_text())["cases"]


def case(name: str) -> dict[str, Any]:
    return cases()[name]


def tensors(name: str) -> dict[str, torch.Tensor]:
    """The golden tensors of one case, e.g. ``tensors("f1_infer_code")``."""
    return load_file(str(FIXTURE_DIR / "golden" / f"{name}.safetensors"))


def fixture_config() -> dict[str, Any]:
    return json.loads((FIXTURE_DIR / "config.json").read_text())
