"""Tensors that still view a memory-mapped weight file after conversion replaced most of it.

safetensors maps each file once and every tensor it returns views that mapping; the
mapping (and every page of it that was read) lives until the last of them dies. Once
int8 or bf16 conversion has replaced the big matrices, the few float tensors left
(norms, small tables) keep the whole file resident: 720 MB of the full GPT file under
int8. Copying those few out lets the mapping go; a file the model still mostly uses
(fp32 weights served zero-copy) is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import mmap
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileViews:
    """The data pointers of the tensors one loaded file returned, and their bytes in all."""

    pointers: frozenset[int]
    num_bytes: int

    @classmethod
    def of(cls, state: dict[str, torch.Tensor]) -> FileViews:
        return cls(frozenset(t.data_ptr() for t in state.values()), sum(t.nbytes for t in state.values()))


def own_leftover_file_views(module: nn.Module, files: list[FileViews]) -> int:
    """Copy out ``module``'s parameters and buffers that view a file it now mostly does not use.

    A file counts as mostly unused when the tensors of ``module`` still viewing it cover under
    half its bytes. Returns the bytes copied.
    """
    copied = 0
    for file in files:
        owners: list[tuple[dict[str, Any], str, torch.Tensor]] = []  # (the module's table, name, tensor)
        live: dict[int, int] = {}
        for sub in module.modules():
            tables: tuple[dict[str, Any], ...] = (sub._parameters, sub._buffers)
            for table in tables:
                for name, tensor in table.items():
                    if tensor is not None and not tensor.is_meta and tensor.data_ptr() in file.pointers:
                        owners.append((table, name, tensor))
                        live[id(tensor)] = tensor.nbytes  # a tensor two modules share counts once
        if not owners or 2 * sum(live.values()) >= file.num_bytes:
            continue
        clones: dict[int, torch.Tensor] = {}
        for table, name, tensor in owners:
            if id(tensor) not in clones:
                if isinstance(tensor, nn.Parameter):
                    tensor.data = tensor.data.clone()  # the same Parameter object, its own storage
                    clones[id(tensor)] = tensor
                else:
                    clones[id(tensor)] = tensor.clone()
                copied += tensor.nbytes
            table[name] = clones[id(tensor)]
    return copied


_MADV_PAGEOUT = 21  # Linux 5.4+: reclaim now; file pages are re-read if touched again, nothing is lost


def page_out(tensor: torch.Tensor) -> None:
    """Ask the kernel to reclaim the whole pages under ``tensor``, which its owner is done with.

    For a weight read from a mapped file (conversion's source) the pages go at once instead of
    staying resident until the mapping dies, which cuts the load peak by up to a file's size.
    Safe whatever the memory is: it never discards data (anonymous pages would go to swap).
    No-op where the OS has no such advice.
    """
    if tensor.device.type != "cpu" or tensor.is_meta or not sys.platform.startswith("linux"):
        return
    page = mmap.PAGESIZE
    start = -(-tensor.data_ptr() // page) * page
    end = (tensor.data_ptr() + tensor.nbytes) // page * page
    lib = libc()
    if end > start and lib is not None:
        lib.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_PAGEOUT)


@functools.cache
def libc() -> ctypes.CDLL | None:
    """The C library, for the memory advice torch does not expose; None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def spill_to_disk(params: list[nn.Parameter], directory: str | None = None) -> int:
    """Move parameters nothing reads now into an unlinked temporary file's mapping, paged out.

    Why: a fused matmul keeps its own (oneDNN-packed) copy, and its bf16 sources are anonymous
    memory the kernel cannot drop without swap: the GPT's weights twice (so are the fp32 weights
    that the bf16 vocoder's copies replace). File-backed, they cost disk instead and come back
    (read from the file) only if the module is unfused or the fp32 modules run. Returns the
    bytes moved; 0 (and the weights stay in memory) where the file cannot be written.
    """
    movable = [p for p in params if p.device.type == "cpu" and not p.is_meta]
    if not movable:
        return 0
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix="turbotts-spill-", suffix=".safetensors") as file:
            save_file({str(i): p.detach().contiguous() for i, p in enumerate(movable)}, file.name)
            mapped = load_file(file.name)  # the mapping outlives the unlinked file
    except OSError as exc:
        logger.warning("kept replaced weights in memory: cannot spill them to %s (%s)", directory or "TMPDIR", exc)
        return 0
    for i, param in enumerate(movable):
        param.data = mapped[str(i)]
        page_out(param)
    return sum(p.nbytes for p in movable)
