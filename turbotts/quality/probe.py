"""One precision mode measured in its own process (``python -m turbotts.quality.probe SPEC OUT``).

Why a process per mode: peak RSS is only meaningful for a fresh interpreter,
and one mode's freed weights would otherwise blur the next one's figure.

The reference mode (no codes given) greedily generates ``num_frames`` codes per
text; every mode then runs the dense GPT forward on the same prompt + those
codes (teacher forcing), so the code distributions of all modes are compared on
identical inputs, and decodes the SAME codes' hidden states to audio through the
hidden-state Decoder and Vocos (float32 in every mode).
"""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from turbotts.bench.roofline import decode_weight_bytes
from turbotts.engine.vocoder_runner import VocoderRunner
from turbotts.model.attention import DecodeMetadata, PrefillMetadata
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.tokenizer import decorate_code_prompt
from turbotts.sources import ModelSource, load_model

TIMING_CONTEXT = 64  # cached tokens per row while timing decode steps
TIMING_STEPS = 8
TIMING_REPEATS = 3
BATCH_SIZES = (1, 16)


@dataclass(frozen=True)
class ProbeSpec:
    """What one probe process loads and measures (JSON-serializable)."""

    checkpoint: str | None
    load_format: str
    dummy_size: str
    dtype: str
    quant: str
    texts: list[str]
    num_frames: int
    codes_path: str | None = None  # the reference run's output; None = generate (reference mode)
    device: str = "cpu"
    key_env: str | None = None  # sealed checkpoint: the variable holding its AES key (inherited by the process)
    public_key: str | None = None


def _prompt_ids(model: ChatTTSModel, text: str) -> torch.Tensor:
    return torch.tensor(model.tokenizer.encode(decorate_code_prompt(text)), dtype=torch.int64)  # (P,)


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


def decode_step_ms(model: ChatTTSModel, batch_size: int) -> float:
    """Best-of-N time (ms) of one decode step plus the code heads for ``batch_size`` rows."""
    gpt, embed, device = model.modules.gpt, model.modules.embed, model.device
    cache = gpt.new_kv_cache(batch_size, TIMING_CONTEXT + TIMING_STEPS + 2)
    emb = torch.randn(batch_size, gpt.config.hidden_size, generator=torch.Generator().manual_seed(0))
    emb = emb.to(device=device, dtype=embed.emb_text.weight.dtype)  # (B, H)
    best = float("inf")
    for _ in range(TIMING_REPEATS):
        for step in range(TIMING_STEPS + 1):
            lens = [TIMING_CONTEXT + step] * batch_size
            meta = DecodeMetadata.build(list(range(batch_size)), lens, device)
            start = time.perf_counter()
            embed.code_logits(gpt.decode(emb, torch.tensor(lens, device=device), meta, cache))
            if step:  # the first step of each repeat warms up
                best = min(best, time.perf_counter() - start)
    return 1000 * best


@torch.inference_mode()
def run_probe(spec: ProbeSpec) -> dict[str, Any]:
    """Load one mode and measure it; see the module docstring."""
    source = ModelSource(
        checkpoint=Path(spec.checkpoint) if spec.checkpoint else None,
        load_format=spec.load_format,
        dummy_size=spec.dummy_size,
        sealed_key_env=spec.key_env,
        public_key=Path(spec.public_key) if spec.public_key else None,
    )
    model = load_model(source, device=spec.device, dtype=spec.dtype, quant=spec.quant)
    gc.collect()
    rss_after_load = psutil.Process().memory_info().rss
    reference = torch.load(spec.codes_path) if spec.codes_path else None
    vocoder = VocoderRunner(model)
    per_text = []
    for index, text in enumerate(spec.texts):
        prompt = _prompt_ids(model, text)
        codes = reference["texts"][index]["codes"] if reference else greedy_codes(model, prompt, spec.num_frames)
        logits, hidden = teacher_forced(model, prompt, codes)
        audio = vocoder.frames_to_audio(hidden[None].to(model.device), use_decoder=True)[0].float().cpu()
        per_text.append({"codes": codes, "logits": logits, "audio": audio})
    timings = {f"step_ms_batch{b}": decode_step_ms(model, b) for b in BATCH_SIZES}
    return {
        "spec": asdict(spec),
        "texts": per_text,
        "weight_bytes": decode_weight_bytes(model),
        "rss_after_load_bytes": rss_after_load,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "is_dummy": model.is_dummy,
        "fingerprint": model.fingerprint,
        "sample_rate_hz": model.sample_rate_hz,
        **timings,
    }


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    spec = ProbeSpec(**json.loads(Path(spec_path).read_text()))
    torch.save(run_probe(spec), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
