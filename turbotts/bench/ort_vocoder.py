"""The vocoder path (hidden states -> Decoder -> mel -> Vocos -> audio) on ONNX Runtime, measured against torch.

Why: the vocoder is convolutions and MLPs, a graph onnxruntime's CPU kernels are tuned for, so it
might run faster there. This exports the path the server runs (``VocoderRunner.frames_to_audio``
with hidden states) and times it against torch on the same inputs, in one run (docs/ort-vocoder.md).
ONNX has no inverse STFT nor complex tensors, so :class:`MatmulISTFT` does ``torch.istft`` with a
windowed inverse-DFT matmul and overlap-add: one graph, no torch at run time, for a matmul where torch
runs an FFT (a few % of the path's multiply-adds).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
import typer
from torch import nn

from turbotts.config import StreamingConfig
from turbotts.cpu.bf16_weights import with_bf16_weights  # the weights VocoderRunner's bf16 mode runs
from turbotts.cpu.info import cpu_info
from turbotts.model import checkpoint as ckpt
from turbotts.model.decoder import HiddenDecoder
from turbotts.model.dummy import DummyFiles
from turbotts.model.vocos import MAX_MAGNITUDE, Vocos
from turbotts.optional import require

MAX_ERROR = 1e-4  # the adoption bar: ONNX audio within this of torch fp32's, everywhere


class MatmulISTFT(nn.Module):
    """``torch.istft(center=True)`` of a (magnitude, phase) spectrum, in ops ONNX has."""

    basis: torch.Tensor
    window_sq: torch.Tensor

    def __init__(self, window: torch.Tensor, hop_length: int) -> None:
        super().__init__()
        n_fft = self.n_fft = window.shape[0]
        self.num_bins = n_fft // 2 + 1  # magnitudes, then as many phases
        self.hop, self.num_shifts = hop_length, n_fft // hop_length  # num_shifts: frames overlapping a sample
        k, n = torch.arange(self.num_bins, dtype=torch.float64)[:, None], torch.arange(n_fft, dtype=torch.float64)
        angle = 2 * math.pi * k * n / n_fft  # (bins, n_fft)
        scale = torch.full_like(k, 2.0 / n_fft)
        scale[0], scale[-1] = 1.0 / n_fft, 1.0 / n_fft  # DC and Nyquist appear once in a real signal
        basis = torch.cat([scale * torch.cos(angle), -scale * torch.sin(angle)]) * window.double()  # (2 bins, n_fft)
        self.register_buffer("basis", basis.float())
        self.register_buffer("window_sq", window.float() ** 2)

    def _overlap_add(self, frames: torch.Tensor) -> torch.Tensor:
        """(B, F, n_fft) frames hop apart -> (B, hop * (F + num_shifts - 1)) samples."""
        shifts = self.num_shifts
        parts = frames.reshape(frames.shape[0], frames.shape[1], shifts, self.hop)  # (B, F, shifts, hop)
        shifted = [nn.functional.pad(parts[:, :, k], (0, 0, k, shifts - 1 - k)) for k in range(shifts)]
        return torch.stack(shifted).sum(0).flatten(1)  # (B, F + shifts - 1, hop) summed -> (B, samples)

    def forward(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """(B, bins, F) each -> (B, hop * (F - 1))."""
        spectrum = torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)  # (B, 2 bins, F)
        frames = torch.matmul(spectrum.transpose(1, 2), self.basis)  # (B, F, n_fft)
        envelope = self._overlap_add(self.window_sq.expand(1, frames.shape[1], self.n_fft))  # (1, samples)
        pad = self.n_fft // 2  # center=True: the first and last half window are padding
        return self._overlap_add(frames)[:, pad:-pad] / envelope[:, pad:-pad]


class ExportedVocoder(nn.Module):
    """Hidden states (B, T, H) -> 24 kHz audio (B, 512 T - 256): the modules' own layers, ISTFT by matmul."""

    def __init__(self, decoder: HiddenDecoder, vocos: Vocos) -> None:
        super().__init__()
        self.decoder, self.backbone, self.out = decoder, vocos.backbone, vocos.head.out
        self.istft = MatmulISTFT(vocos.head.istft.window, vocos.config.hop_length)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        mel = self.decoder.mel_from_features(frames.transpose(1, 2))  # (B, 100, 2T)
        y = self.out(self.backbone(mel)).transpose(1, 2)  # (B, n_fft + 2, 2T)
        magnitude = torch.exp(y[:, : self.istft.num_bins]).clamp(max=MAX_MAGNITUDE)  # (B, bins, 2T)
        return self.istft(magnitude, y[:, self.istft.num_bins :])


def load_audio_decoders(size: str = "full", seed: int = 0) -> tuple[HiddenDecoder, Vocos]:
    """The Decoder and Vocos of a dummy checkpoint (random weights), without the GPT."""
    files = DummyFiles(size, seed)
    decoder, vocos = HiddenDecoder(files.config.decoder), Vocos(files.config.vocos)
    decoder.load_state_dict(files.tensors(ckpt.DECODER_FILE)), vocos.load_state_dict(files.tensors(ckpt.VOCOS_FILE))
    return decoder.eval().requires_grad_(False), vocos.eval().requires_grad_(False)


@torch.inference_mode()
def torch_audio(decoder: HiddenDecoder, vocos: Vocos, frames: torch.Tensor, is_bf16: bool = False) -> torch.Tensor:
    """(B, T, H) -> (B, 512 T - 256): what ``VocoderRunner.frames_to_audio`` runs for hidden states."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=is_bf16):
        mel = decoder.decode(frames.float().transpose(1, 2))  # (B, 100, 2T)
        return vocos.decode(mel.float()).float()


def export_onnx(decoder: HiddenDecoder, vocos: Vocos, path: Path) -> Path:
    """Write the path to ``path``, batch and frame axes dynamic (input ``frames``: the argument; output ``audio``)."""
    example = torch.randn(2, 16, decoder.input_channels)  # not 1: export would fix a size-1 axis
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("frames", min=1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(ExportedVocoder(decoder, vocos).eval(), (example,), str(path), output_names=["audio"],
                      dynamic_shapes={"frames": dims}, dynamo=True, external_data=False)  # fmt: skip
    return path


def ort_session(path: Path) -> Any:
    """A CPUExecutionProvider session using as many intra-op threads as torch does."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_audio(session: Any, frames: torch.Tensor) -> np.ndarray:
    """(B, T, H) -> (B, 512 T - 256) from the exported graph."""
    return session.run(None, {"frames": frames.float().numpy()})[0]


def streaming_frame_counts(config: StreamingConfig | None = None) -> list[int]:
    """Window lengths the engine decodes: the first chunk, a steady chunk, the largest chunk (with context)."""
    c = config or StreamingConfig()
    later = [c.left_context_frames + chunk + c.lookahead_frames for chunk in (c.chunk_frames, c.max_chunk_frames)]
    return [c.first_chunk_frames + c.first_chunk_lookahead_frames, *later]


def _time_round_robin(runs: dict[str, Callable[[], Any]]) -> dict[str, tuple[list[float], Any]]:
    """Seconds of each call and the output of each side, the sides taking turns: a passing load hits them alike."""
    outputs = {name: run() for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    while min(len(t) for t in times.values()) < 3 or min(sum(t) for t in times.values()) < 1.0:  # 3 calls, 1 s
        for name, run in runs.items():
            start = time.perf_counter()
            outputs[name] = run()
            times[name].append(time.perf_counter() - start)
    return {name: (times[name], outputs[name]) for name in runs}


def measure(decoder: HiddenDecoder, vocos: Vocos, session: Any, batches: list[int], frame_counts: list[int],
            *, seed: int = 0, with_bf16: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """One row per (side, batch, frames): best and median ms per call, audio-s/s (of the best), error vs torch fp32."""
    bf16 = (with_bf16_weights(decoder), with_bf16_weights(vocos)) if with_bf16 else None
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for batch in batches:
        for num_frames in frame_counts:
            frames = torch.randn(batch, num_frames, decoder.input_channels, generator=generator)  # (B, T, H)
            runs: dict[str, Callable[[], Any]] = {"torch_fp32": partial(torch_audio, decoder, vocos, frames)}
            runs["onnxruntime_fp32"] = partial(ort_audio, session, frames)
            if bf16 is not None:
                runs["torch_bf16"] = partial(torch_audio, *bf16, frames, True)
            results = _time_round_robin(runs)
            reference = np.asarray(results["torch_fp32"][1])
            audio_s = batch * (512 * num_frames - 256) / vocos.config.sample_rate_hz
            rows += [{"side": name, "batch": batch, "frames": num_frames, "best_ms": 1000 * min(times),
                      "median_ms": 1000 * statistics.median(times), "num_calls": len(times),
                      "audio_s_per_s": audio_s / min(times), "peak_abs": float(np.abs(reference).max()),
                      "max_abs_error": float(np.abs(np.asarray(audio) - reference).max())}
                     for name, (times, audio) in results.items()]  # fmt: skip
    return rows


def _machine() -> dict[str, Any]:
    """The CPU (ISA, family, model), threads and load: the figures are only comparable on the same machine."""
    text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="ignore") if Path("/proc/cpuinfo").exists() else ""
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.split("\n\n")[0].splitlines())}
    return {"cpu": cpu_info().report(), "cpu_family": fields.get("cpu family"), "cpu_model": fields.get("model"),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "load_avg_1m_before": os.getloadavg()[0]}  # fmt: skip


def decide(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Adopt only if ONNX is within MAX_ERROR of torch fp32 and faster at every shape than each torch mode timed:
    fp32, and bf16 where it is native (there ``auto`` runs the vocoder in bf16)."""
    speed = {(r["side"], f"b{r['batch']}_t{r['frames']}"): r["audio_s_per_s"] for r in rows}
    shapes = [shape for side, shape in speed if side == "onnxruntime_fp32"]
    sides = sorted({side for side, _ in speed} - {"onnxruntime_fp32"})  # the torch modes timed
    over = {side: {shape: speed["onnxruntime_fp32", shape] / speed[side, shape] for shape in shapes} for side in sides}
    error = max(r["max_abs_error"] for r in rows if r["side"] == "onnxruntime_fp32")
    is_faster, is_close = all(min(ratios.values()) > 1.0 for ratios in over.values()), error <= MAX_ERROR
    return {"ort_over": over, "ort_max_abs_error": error, "is_faster": is_faster,
            "is_within_error": is_close, "adopt_in_auto": is_faster and is_close}  # fmt: skip


def write_plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Audio-s/s per shape and side (bars), and ONNX over torch fp32 (line at 1)."""
    from turbotts.bench.figures import new_figure, save_figure

    fig, (left, right) = new_figure(2, (12, 4.5))
    shapes, sides = sorted({(r["batch"], r["frames"]) for r in rows}), list(dict.fromkeys(r["side"] for r in rows))
    value = {(r["side"], r["batch"], r["frames"]): r["audio_s_per_s"] for r in rows}
    ticks, width = {"xticks": range(len(shapes)), "xticklabels": [f"B{b} T{t}" for b, t in shapes]}, 0.8 / len(sides)
    for i, side in enumerate(sides):
        xs = [x + (i - (len(sides) - 1) / 2) * width for x in range(len(shapes))]
        left.bar(xs, [value[(side, b, t)] for b, t in shapes], width, label=side)
    left.set(**ticks, ylabel="audio s per s (best call)")
    left.legend()
    right.bar(ticks["xticks"], [value[("onnxruntime_fp32", *s)] / value[("torch_fp32", *s)] for s in shapes])
    right.axhline(1.0, color="black", linewidth=1)
    right.set(**ticks, ylabel="onnxruntime / torch fp32 (above 1: ORT faster)")
    save_figure(fig, path, title)


def run(out: Path, dummy_size: str, batches: str, frames: str, seed: int, threads: int) -> None:
    """Export Decoder + Vocos to ONNX and time onnxruntime against torch on the same inputs (JSON + PNG)."""
    require("onnx", "onnxruntime", "onnxscript", "matplotlib", purpose="turbotts ort-vocoder")
    torch.set_num_threads(threads or torch.get_num_threads())  # ort_session takes torch's count
    decoder, vocos = load_audio_decoders(dummy_size, seed)
    path = export_onnx(decoder, vocos, out / "vocoder.onnx")
    frame_counts = [int(v) for v in frames.split(",")] if frames else streaming_frame_counts()
    machine = _machine()  # torch bf16 timed only where native (emulated, it is slower than fp32)
    rows = measure(decoder, vocos, ort_session(path), [int(v) for v in batches.split(",")], frame_counts,
                   seed=seed, with_bf16=cpu_info().has_native_bf16)  # fmt: skip
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine, "load_avg_1m_after": os.getloadavg()[0]},
        "versions": {"torch": torch.__version__, "onnxruntime": version("onnxruntime"), "onnx": version("onnx"),
                     "python": platform.python_version()},
        "export": {"exporter": "torch.onnx.export(dynamo=True)", "istft": "matmul DFT + overlap-add in the graph",
                   "onnx_bytes": path.stat().st_size, "dummy_size": dummy_size},
        "rows": rows, "decision": decide(rows),
    }  # fmt: skip
    (out / "ort_vocoder.json").write_text(json.dumps(report, indent=2) + "\n")
    write_plot(rows, out / "ort_vocoder.png", f"Decoder + Vocos: onnxruntime vs torch ({dummy_size}, {cpu_info().isa})")
    for r in rows:
        typer.echo("{side:>17} B={batch:<3} T={frames:<4} best {best_ms:8.1f} ms, median {median_ms:8.1f} ms, "
                   "{audio_s_per_s:6.1f} audio-s/s, err {max_abs_error:.1e}".format(**r))  # fmt: skip
    typer.echo(json.dumps(report["decision"]))
