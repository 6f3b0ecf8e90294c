"""The two forwards a precision is compared by: greedy codes, and the dense forward over them.

Why teacher forcing: a greedy run of another precision may take another code early and then
diverge as a whole, so modes are compared on identical inputs, the reference's own codes.
"""

from __future__ import annotations

import torch

from turbotts.model.attention_metadata import DecodeMetadata, PrefillMetadata
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.tokenizer import decorate_code_prompt


def prompt_ids(model: ChatTTSModel, text: str) -> torch.Tensor:
    """(P,) the code prompt's token ids for ``text``."""
    return torch.tensor(model.tokenizer.encode(decorate_code_prompt(text)), dtype=torch.int64)


def greedy_codes(model: ChatTTSModel, prompt: torch.Tensor, num_frames: int) -> torch.Tensor:
    """(num_frames, num_vq) argmax codes with a KV cache; EOS is banned so every text has num_frames."""
    gpt, embed, device = model.modules.gpt, model.modules.embed, model.device
    num_prompt = prompt.numel()
    cache = gpt.new_kv_cache(1, num_prompt + num_frames + 1)
    emb = embed.embed_text_ids(prompt[None].to(device))  # (1, P, H)
    positions = torch.arange(num_prompt, device=device)[None]  # (1, P)
    hidden = gpt.prefill(emb, positions, PrefillMetadata.build([0], [num_prompt]), cache)[:, -1]  # (1, H)
    codes = []
    for step in range(num_frames):
        logits = embed.code_logits(hidden).float()  # (1, num_vq, V)
        logits[..., model.config.gpt.audio_eos_id] = float("-inf")
        code = logits.argmax(-1)  # (1, num_vq)
        codes.append(code)
        if step + 1 < num_frames:
            position = num_prompt + step
            meta = DecodeMetadata.build([0], [position], device)
            hidden = gpt.decode(embed.embed_codes(code), torch.tensor([position], device=device), meta, cache)
    return torch.cat(codes).cpu()  # (T, num_vq)


def teacher_forced(model: ChatTTSModel, prompt: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Code logits (T, num_vq, V) float32 and hidden states (T, H) float32 of the
    positions that predict ``codes`` (T, num_vq), from one dense forward."""
    gpt, embed, device = model.modules.gpt, model.modules.embed, model.device
    num_prompt, num_frames = prompt.numel(), codes.shape[0]
    length = num_prompt + num_frames - 1
    input_ids = torch.zeros(1, length, codes.shape[1], dtype=torch.int64)  # (1, L, num_vq)
    input_ids[0, :num_prompt, 0] = prompt
    input_ids[0, num_prompt:] = codes[:-1]
    text_mask = torch.zeros(1, length, dtype=torch.bool)
    text_mask[0, :num_prompt] = True
    emb = embed.embed(input_ids.to(device), text_mask.to(device))  # (1, L, H)
    hidden = gpt(emb, torch.arange(length, device=device)[None])[0, num_prompt - 1 :]  # (T, H)
    return embed.code_logits(hidden).float().cpu(), hidden.float().cpu()
