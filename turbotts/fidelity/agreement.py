"""Agreement between two models' code distributions on the same (teacher-forced) inputs."""

from __future__ import annotations

import torch


def code_agreement(reference_logits: torch.Tensor, test_logits: torch.Tensor) -> float:
    """Share of (position, codebook) pairs whose argmax code is the same.

    Args:
        reference_logits, test_logits: (..., num_audio_tokens), same shape.
    """
    return float((reference_logits.argmax(-1) == test_logits.argmax(-1)).float().mean())


def mean_kl(reference_logits: torch.Tensor, test_logits: torch.Tensor) -> float:
    """Mean KL(P_ref || P_test) in nats over all (position, codebook) distributions,
    computed in float64 so tiny divergences do not round to zero."""
    ref = torch.log_softmax(reference_logits.double(), dim=-1)
    test = torch.log_softmax(test_logits.double(), dim=-1)
    return float((ref.exp() * (ref - test)).sum(-1).mean())
