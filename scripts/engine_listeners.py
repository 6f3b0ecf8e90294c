"""Closed-loop listeners on the engine itself, in one process: continuity, and where the engine's time goes.

Why: the capacity command measures a box through HTTP, the encoders and a load tester, which is
what a user sees but hides why a level fails. This drives :class:`EngineCore` directly (full-size
dummy weights, the serve defaults, admission off) with ``--listeners`` closed-loop streams, each
heard by the load tester's player (:func:`simulate_playback`, ``--buffer-s`` of prebuffer), and
counts what each step ran (batch sizes), the GPT's and the vocoder's share of the wall time, and
how many frames the vocoder decoded per frame it sent (the re-decoded chunk context). Every
configuration of ``--configs`` runs one after another in one process, on the same weights, so the
rows compare. JSON + PNG.

    python scripts/engine_listeners.py --listeners 3 --configs fifo,deadline --duration-s 40 \\
        --out docs/benchmarks/capacity/engine_listeners.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turbotts.bench.loadtest_corpus import BUILTIN_TEXTS
from turbotts.bench.loadtest_player import AudioArrival, simulate_playback
from turbotts.bench.step_profile_command import cpu_identity
from turbotts.config import EngineConfig
from turbotts.engine.core import EngineCore
from turbotts.engine.streaming import SAMPLES_PER_FRAME, DecodeWindow
from turbotts.model.chattts import ChatTTSModel
from turbotts.params import SamplingParams, SynthesisParams
from turbotts.sources import ModelSource, load_model_gated

#: one segment each: a multi-segment text is the server's pipeline, not the engine's
TEXTS = tuple(text for text in BUILTIN_TEXTS if len(text) < 90)


@dataclass
class Listener:
    """One closed-loop listener: a new request as soon as the last one finished."""

    index: int
    num_sent: int = 0
    request_id: str = ""
    sent_s: float = 0.0
    audio_s: float = 0.0
    arrivals: list[AudioArrival] = field(default_factory=list)


@dataclass
class Tally:
    """What the engine did over the run."""

    gpt_s: float = 0.0
    vocoder_s: float = 0.0
    num_decoded_frames: int = 0
    num_sent_frames: float = 0.0
    batches: Counter[str] = field(default_factory=Counter)


def _send(core: EngineCore, listener: Listener, max_new_tokens: int) -> None:
    listener.request_id = f"l{listener.index}-{listener.num_sent}"
    listener.num_sent += 1
    listener.sent_s, listener.audio_s, listener.arrivals = time.perf_counter(), 0.0, []
    code = SamplingParams(max_new_tokens=max_new_tokens)
    seed = 1000 * listener.num_sent + listener.index
    params = SynthesisParams(code=code, refine_text=False, seed=seed, voice_seed=listener.index)
    core.add_request(listener.request_id, TEXTS[seed % len(TEXTS)], params, stream=True)


def _instrument(core: EngineCore, tally: Tally) -> None:
    """Time the GPT (the runner) and the vocoder calls of every step."""
    execute, decode = core.runner.execute, core.vocoder.decode

    def timed_execute(work: Any) -> Any:
        start = time.perf_counter()
        result = execute(work)
        tally.gpt_s += time.perf_counter() - start
        return result

    def timed_decode(windows: list[DecodeWindow]) -> Any:
        start = time.perf_counter()
        result = decode(windows)
        if windows:
            tally.vocoder_s += time.perf_counter() - start
            tally.num_decoded_frames += sum(w.frames.shape[0] for w in windows)
            tally.num_sent_frames += sum(w.keep_to - w.keep_from for w in windows) / SAMPLES_PER_FRAME
        return result

    core.runner.execute = timed_execute  # type: ignore[method-assign]
    core.vocoder.decode = timed_decode  # type: ignore[method-assign]


def run_config(model: ChatTTSModel, vocoder_dtype: str, scheduling: str, args: argparse.Namespace) -> dict[str, Any]:
    """``args.listeners`` closed-loop listeners for ``args.duration_s`` on one engine."""
    config = EngineConfig(
        admission="off", scheduling=scheduling, vocoder_dtype=vocoder_dtype, playback_buffer_s=args.buffer_s
    )
    core = EngineCore(model, config)
    tally = Tally()
    _instrument(core, tally)
    listeners = [Listener(index) for index in range(args.listeners)]
    by_request: dict[str, Listener] = {}
    for listener in listeners:
        _send(core, listener, args.max_new_tokens)
        by_request[listener.request_id] = listener
    playbacks = []
    start = time.perf_counter()
    while time.perf_counter() - start < args.duration_s:
        outputs = core.step()
        step = core.last_step
        if step is not None and (step.num_prefill or step.num_decode):
            tally.batches[f"{step.num_prefill} prefill + {step.num_decode} decode"] += 1
        now = time.perf_counter()
        for output in outputs:
            listener = by_request[output.request_id]
            if output.audio.size:
                listener.audio_s += output.audio.size / model.sample_rate_hz
                listener.arrivals.append(AudioArrival(now - listener.sent_s, listener.audio_s))
            if output.is_finished:
                if listener.arrivals:
                    playbacks.append(simulate_playback(listener.arrivals, prebuffer_s=args.buffer_s))
                del by_request[output.request_id]
                _send(core, listener, args.max_new_tokens)
                by_request[listener.request_id] = listener
    wall_s = time.perf_counter() - start
    num_steps = sum(tally.batches.values())
    return {
        "scheduling": scheduling,
        "num_streams": len(playbacks),
        "continuity_rate": sum(p.is_continuous for p in playbacks) / max(len(playbacks), 1),
        "stall_s_total": sum(p.total_stall_s for p in playbacks),
        "audio_s_per_s": tally.num_sent_frames * SAMPLES_PER_FRAME / model.sample_rate_hz / wall_s,
        "gpt_share": tally.gpt_s / wall_s,
        "vocoder_share": tally.vocoder_s / wall_s,
        "decoded_per_sent_frame": tally.num_decoded_frames / max(tally.num_sent_frames, 1.0),
        "steps_per_s": num_steps / wall_s,
        "batches": dict(tally.batches.most_common()),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """Continuity and the engine's time shares, one bar group per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    labels = [run["scheduling"] for run in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(labels, [run["continuity_rate"] for run in runs], color="tab:green")
    left.set_ylim(0, 1.05)
    left.set_title(f"continuity, {report['listeners']} listeners")
    bottom = [0.0] * len(runs)
    for key, color in (("gpt_share", "tab:blue"), ("vocoder_share", "tab:orange")):
        values = [run[key] for run in runs]
        right.bar(labels, values, bottom=bottom, color=color, label=key.removesuffix("_share"))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_ylim(0, 1.05)
    right.set_title("engine time share")
    right.legend(loc="lower right")
    cpu = report["machine"]["cpu"]
    fig.suptitle(f"{cpu.get('model')}, family {cpu.get('family')} model {cpu.get('model_number')}, {cpu.get('isa')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listeners", type=int, default=3)
    parser.add_argument("--configs", default="fifo,deadline", help="scheduling modes, comma-separated")
    parser.add_argument("--duration-s", type=float, default=40.0)
    parser.add_argument("--buffer-s", type=float, default=1.0, help="the player's prebuffer")
    parser.add_argument("--max-new-tokens", type=int, default=250)
    parser.add_argument("--out", type=Path, default=Path("engine_listeners.json"))
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.listeners < 1 or args.duration_s <= 0 or not configs:
        parser.error("--listeners and --duration-s must be positive, --configs not empty")
    from rich.progress import Progress

    source = ModelSource(load_format="dummy", dummy_size="full")
    model, gated = load_model_gated(source, dtype="auto", quant="auto", vocoder_dtype="auto")
    runs = []
    with Progress() as bar:
        task = bar.add_task("configurations", total=len(configs))
        for scheduling in configs:
            runs.append(run_config(model, gated.precision.vocoder_dtype, scheduling, args))
            bar.advance(task)
    report = {
        "listeners": args.listeners,
        "duration_s": args.duration_s,
        "buffer_s": args.buffer_s,
        "max_new_tokens": args.max_new_tokens,
        "precision": gated.report(),
        "machine": {"cpu": cpu_identity()},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    plot(report, args.out.with_suffix(".png"))
    for run in runs:
        print(json.dumps({k: v for k, v in run.items() if k != "batches"}))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
