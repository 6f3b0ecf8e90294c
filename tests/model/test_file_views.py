"""Weight files stop being resident once conversion has replaced what the model used of them."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.golden import FIXTURE_DIR
from turbotts.model.file_views import page_out
from turbotts.model.layers import FusedLinear
from turbotts.sources import ModelSource, load_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")


def resident_kib(path: Path) -> int | None:
    """The resident KiB of this process's mappings of ``path``; None when it is not mapped at all."""
    total, current, is_mapped = 0, "", False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            current = fields[5] if len(fields) > 5 else ""
            is_mapped |= current == str(path)
        elif fields[0] == "Rss:" and current == str(path):
            total += int(fields[1])
    return total if is_mapped else None


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    """A private copy, so no other model loaded in this process maps the same files."""
    return Path(shutil.copytree(FIXTURE_DIR, tmp_path / "ckpt"))


def test_an_int8_model_lets_its_gpt_file_go_and_an_fp32_one_serves_it_zero_copy(checkpoint: Path) -> None:
    gpt_file = checkpoint / "asset" / "gpt" / "model.safetensors"
    fp32 = load_model(ModelSource(checkpoint=checkpoint))
    assert resident_kib(gpt_file) is not None  # the fp32 weights are the file's pages
    del fp32
    int8 = load_model(ModelSource(checkpoint=checkpoint), quant="int8")
    assert resident_kib(gpt_file) is None  # norms copied out: nothing holds the mapping
    assert int8.modules.gpt.norm.weight.abs().sum() > 0


def test_page_out_drops_a_mapped_weight_from_memory_and_keeps_its_values(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.randn(4096, 1024)}, str(path))  # 16 MiB
    weight = load_file(str(path))["w"]
    expected = float(weight.sum())
    assert (resident_kib(path) or 0) > 14 * 1024
    page_out(weight)
    assert (resident_kib(path) or 0) < 16 * 1024 / 3  # whole pages go; a large folio at an edge may stay
    assert float(weight.sum()) == expected  # re-read from the file


def test_a_fused_copy_hands_its_mapped_sources_back_and_they_come_back_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "qkv.safetensors"
    save_file({name: torch.randn(2048, 1024) for name in "qkv"}, str(path))  # 8 MiB each
    weights = load_file(str(path))
    x = torch.randn(3, 1024)
    expected = [x @ w.T for w in weights.values()]  # reads every page
    assert (resident_kib(path) or 0) > 22 * 1024
    fused = FusedLinear(list(weights.values()), use_onednn=True)
    assert (resident_kib(path) or 0) < 24 * 1024 / 3  # the copy serves; the sources are not resident
    for got, want in zip(fused.split(x), expected, strict=True):
        assert torch.allclose(got, want, atol=1e-4)
    again = [x @ w.T for w in weights.values()]  # unfused use re-reads the file
    assert all(torch.equal(a, b) for a, b in zip(again, expected, strict=True))


def mapping_of(address: int) -> str:
    """The path of the mapping holding ``address`` ("" for anonymous memory)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < end:
            return fields[5] if len(fields) > 5 else ""
    raise AssertionError(f"{address:#x} is not mapped")


def test_bf16_sources_of_fused_matmuls_move_to_an_unlinked_file_and_still_compute(checkpoint: Path) -> None:
    model = load_model(ModelSource(checkpoint=checkpoint), dtype="bf16")
    gpt = model.modules.gpt
    attn = gpt.layers[0].self_attn
    assert gpt.is_fused and attn.q_proj.weight.dtype == torch.bfloat16
    where = mapping_of(attn.q_proj.weight.data_ptr())
    assert "turbotts-spill-" in where and where.endswith("(deleted)")
    assert "turbotts-spill-" not in mapping_of(gpt.norm.weight.data_ptr())  # only the fused matmuls' sources
    x = torch.randn(1, 3, gpt.config.hidden_size, dtype=torch.bfloat16)
    fused_q = attn._qkv.split(x)[0]
    gpt.unfuse()
    assert torch.allclose(attn.q_proj(x).float(), fused_q.float(), atol=2e-2)
