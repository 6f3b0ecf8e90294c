"""The int8 tiles' huge-page buffer: the same values, one mapping, huge pages where the kernel grants them."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from turbotts.config import GPTConfig
from turbotts.cpu.huge_pages import DISABLE_ENV, HugePageBuffer, huge_page_bytes, thp_mode
from turbotts.cpu.quant import Int8Linear, quantize_layers
from turbotts.model.gpt import GPT, DecoderLayer

HAS_THP = thp_mode() in ("always", "madvise")


def _tensors() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [
        torch.randint(-127, 128, (96, 64), dtype=torch.int8, generator=generator),
        torch.randn(3, 5, generator=generator),  # another dtype, a size that is no multiple of anything
        torch.randint(-127, 128, (4096, 1024), dtype=torch.int8, generator=generator),  # 4 MiB
    ]


def _moved(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    buffer = HugePageBuffer.create(sum(t.nbytes for t in tensors))
    assert buffer is not None
    return [buffer.place(t) for t in tensors]


@pytest.mark.skipif(not HAS_THP, reason="the kernel has transparent huge pages off")
def test_tensors_move_into_one_buffer_in_order_with_their_values() -> None:
    tensors = _tensors()
    copies = [t.clone() for t in tensors]
    views = _moved(tensors)
    storage = views[0].untyped_storage().data_ptr()
    offset = 0
    for view, tensor, copy in zip(views, tensors, copies, strict=True):
        assert view.dtype == tensor.dtype and view.shape == tensor.shape and view.is_contiguous()
        assert torch.equal(view, copy) and torch.equal(tensor, copy)  # the source is left as it was
        assert view.untyped_storage().data_ptr() == storage  # one buffer...
        assert view.data_ptr() == storage + offset  # ...holding them back to back
        offset += tensor.nbytes


@pytest.mark.skipif(not HAS_THP, reason="the kernel has transparent huge pages off")
def test_a_tensor_that_does_not_fit_is_refused() -> None:
    buffer = HugePageBuffer.create(100)
    assert buffer is not None
    buffer.place(torch.zeros(60, dtype=torch.int8))
    with pytest.raises(ValueError, match="fits in what is left"):
        buffer.place(torch.zeros(60, dtype=torch.int8))


@pytest.mark.skipif(not HAS_THP, reason="the kernel has transparent huge pages off")
def test_the_buffer_is_backed_by_huge_pages_and_plain_memory_is_not() -> None:
    big = torch.randint(-127, 128, (16 * 2**20,), dtype=torch.int8)
    (view,) = _moved([big])
    assert (huge_page_bytes(view) or 0) >= 8 * 2**20  # most of a 16 MiB buffer (its ends may not be aligned)
    assert huge_page_bytes(torch.ones(1000)) == 0  # madvise mode: the allocator's memory stays on 4 KiB pages


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "0")
    assert HugePageBuffer.create(2**20) is None


def _tiles_of(gpt: GPT) -> list[torch.Tensor]:
    tiles = []
    for layer in gpt.layers:
        layer = cast(DecoderLayer, layer)
        for linear in (layer.self_attn._qkv, layer.self_attn._o, layer.mlp._gate_up, layer.mlp._down):
            assert isinstance(linear, Int8Linear) and linear.tiles is not None
            tiles.append(linear.tiles)
    return tiles


@pytest.mark.usefixtures("int8_kernel")  # the tiles exist only where the kernels are built
@pytest.mark.parametrize("is_on", [True, False])
def test_a_quantized_gpt_streams_its_tiles_from_one_buffer(is_on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1" if is_on else "0")
    torch.manual_seed(0)
    gpt = GPT(
        GPTConfig(
            hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2
        )
    ).eval()
    with torch.inference_mode():
        quantize_layers(gpt)
    storages = {tile.untyped_storage().data_ptr() for tile in _tiles_of(gpt)}
    assert len(storages) == (1 if is_on and HAS_THP else 8)
