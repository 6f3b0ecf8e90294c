"""Time one decode step of the full-size GPT on CPU (random weights, fp32).

A step is what the engine runs per generated code frame: embed the previous
codes, run the GPT over the KV cache, and compute the 4 code heads.

    python scripts/bench_gpt_decode.py --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from turbotts.config import GPTConfig
from turbotts.model.attention_metadata import DecodeMetadata, DecodeStrategy
from turbotts.model.embed import Embed
from turbotts.model.gpt import GPT


def time_step(gpt: GPT, embed: Embed, batch: int, cached: int, strategy: DecodeStrategy, repeats: int) -> float:
    """Fastest seconds of one decode step for ``batch`` rows with ``cached`` tokens each
    (the minimum, because other processes on a small machine only add noise)."""
    cache = gpt.new_kv_cache(num_slots=max(16, batch), max_seq_len=cached + 64)
    cache.data.normal_()
    slots = list(range(0, 2 * batch, 2))[:batch] if 2 * batch <= cache.num_slots else list(range(batch))
    codes = torch.randint(0, gpt.config.num_audio_tokens, (batch, gpt.config.num_vq))
    lens = [cached - (i % 7) for i in range(batch)]  # slightly ragged, as in continuous batching
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 2):
            start = time.perf_counter()
            meta = DecodeMetadata.build(slots, lens, strategy=strategy)
            hidden = gpt.decode(embed.embed_codes(codes), torch.tensor(lens), meta, cache)
            embed.code_logits(hidden)
            times.append(time.perf_counter() - start)
    return min(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPTConfig()
    gpt, embed = GPT(config).eval(), Embed(config).eval()
    cases = [(1, 100), (8, 300), (16, 300)]
    for is_fused in (False, True):
        if is_fused:
            gpt.fuse()
            embed.fuse()
        for strategy in DecodeStrategy:
            for batch, cached in cases:
                seconds = time_step(gpt, embed, batch, cached, strategy, args.repeats)
                print(
                    f"fused={is_fused!s:5} {strategy.value:8} batch={batch:2} cached={cached}: "
                    f"{seconds * 1e3:6.1f} ms/step",
                    flush=True,
                )


if __name__ == "__main__":
    main()
