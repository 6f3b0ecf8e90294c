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
from turbotts.fidelity.forward import greedy_codes, prompt_ids, teacher_forced
from turbotts.model.attention_metadata import DecodeMetadata
from turbotts.model.chattts import ChatTTSModel
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
        prompt = prompt_ids(model, text)
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
