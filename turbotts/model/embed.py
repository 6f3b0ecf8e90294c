"""Token embeddings and output heads around the GPT.

A position holds either one text token or ``num_vq`` parallel audio codes. Text
ids run past the end of the code tables, so each table is looked up only at the
positions it applies to. The official checkpoint stores the heads weight-normed;
:func:`fold_weight_norm` turns them into plain weights once at load time so the
per-step heads are single matmuls.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from turbotts.config import GPTConfig
from turbotts.errors import CheckpointError
from turbotts.model.layers import Fusable, FusedLinear

_WN_G = ".parametrizations.weight.original0"  # g, (out, 1)
_WN_V = ".parametrizations.weight.original1"  # v, (out, in)


def fold_weight_norm(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Replace every weight-normed ``X.parametrizations.weight.original0/1`` pair by ``X.weight``.

    W = g * v / ||v||, the norm taken per output row (torch ``weight_norm`` with
    dim=0), computed by the same kernel torch's parametrization uses so the
    folded weight is bit-identical to the official model's. Other keys pass through.

    Raises:
        CheckpointError: a g has no matching v or the other way round.
    """
    folded: dict[str, Tensor] = {}
    for key, value in state_dict.items():
        if key.endswith(_WN_V):
            continue
        if not key.endswith(_WN_G):
            folded[key] = value
            continue
        prefix = key[: -len(_WN_G)]
        v = state_dict.get(prefix + _WN_V)
        if v is None:
            raise CheckpointError(f"{key} has no matching {prefix + _WN_V}; the Embed checkpoint is incomplete")
        folded[prefix + ".weight"] = torch._weight_norm(v, value, 0)
    for key in state_dict:
        if key.endswith(_WN_V) and key[: -len(_WN_V)] + _WN_G not in state_dict:
            raise CheckpointError(f"{key} has no matching weight-norm g; the Embed checkpoint is incomplete")
    return folded


class Embed(Fusable):
    """Text/code embedding tables and the text/code output heads (official names).

    ``fuse()`` runs the num_vq code heads as one matmul and prepacks both heads
    for oneDNN on CPU (the text head alone is 21178 x 768, a large part of each
    refine step); see :class:`~turbotts.model.layers.Fusable`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.num_vq = config.num_vq
        self.num_audio_tokens = config.num_audio_tokens
        self.emb_code = nn.ModuleList(nn.Embedding(config.num_audio_tokens, hidden) for _ in range(config.num_vq))
        self.emb_text = nn.Embedding(config.num_text_tokens, hidden)
        self.head_code = nn.ModuleList(
            nn.Linear(hidden, config.num_audio_tokens, bias=False) for _ in range(config.num_vq)
        )
        self.head_text = nn.Linear(hidden, config.num_text_tokens, bias=False)
        self._code_heads: FusedLinear | None = None
        self._text_head: FusedLinear | None = None

    def _build_fused(self, use_onednn: bool) -> None:
        self._code_heads = FusedLinear([cast(nn.Linear, head).weight for head in self.head_code], use_onednn)
        self._text_head = FusedLinear([self.head_text.weight], use_onednn)

    def _drop_fused(self) -> None:
        self._code_heads = None
        self._text_head = None

    def embed(self, input_ids: Tensor, text_mask: Tensor) -> Tensor:
        """Embed a prompt batch.

        Args:
            input_ids: (B, L, num_vq) int64; at text positions only column 0 is used.
            text_mask: (B, L) bool, True at text positions (False at codes and padding).

        Returns:
            (B, L, hidden): emb_text at text positions, the sum over q of
            emb_code[q] elsewhere.
        """
        text_mask = text_mask.bool()
        out = torch.zeros(
            *text_mask.shape,
            self.emb_text.embedding_dim,
            dtype=self.emb_text.weight.dtype,
            device=self.emb_text.weight.device,
        )  # (B, L, hidden)
        out[text_mask] = self.emb_text(input_ids[..., 0][text_mask])
        is_code = ~text_mask
        if bool(is_code.any()):
            out[is_code] = self.embed_codes(input_ids[is_code])
        return out

    def embed_codes(self, codes: Tensor) -> Tensor:
        """(N, num_vq) int64 audio codes -> (N, hidden), the sum of the per-q embeddings."""
        # the functional lookup on each table's weight: the same rows without num_vq module calls every step
        weights = [cast(nn.Embedding, table).weight for table in self.emb_code]
        per_q = [F.embedding(ids, weight) for ids, weight in zip(codes.unbind(1), weights, strict=True)]
        return torch.stack(per_q, dim=2).sum(dim=2)  # (N, hidden, num_vq) -> (N, hidden)

    def embed_text_ids(self, ids: Tensor) -> Tensor:
        """(N,) int64 text ids -> (N, hidden), for text (refine) decode steps."""
        return self.emb_text(ids)

    def code_logits(self, hidden: Tensor) -> Tensor:
        """(..., hidden) -> (..., num_vq, num_audio_tokens) logits of the next code frame."""
        if self._code_heads is not None:
            logits = self._code_heads(hidden)  # (..., num_vq * num_audio_tokens), q-major
            return logits.unflatten(-1, (self.num_vq, self.num_audio_tokens))  # (..., num_vq, num_audio_tokens)
        return torch.stack([head(hidden) for head in self.head_code], dim=-2)  # (..., num_vq, num_audio_tokens)

    def text_logits(self, hidden: Tensor) -> Tensor:
        """(..., hidden) -> (..., num_text_tokens) logits of the next text token."""
        return self.head_text(hidden) if self._text_head is None else self._text_head(hidden)
