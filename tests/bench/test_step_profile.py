"""`turbotts bench-steps` on the tiny model: the JSON contract, the plot, the paths it names, bad input.

The command runs in this process (:mod:`tests.cli_runner`) with the fewest steps and batches its
assertions need; the helpers it is built from are checked on their own against the engine's parts.
"""

from __future__ import annotations

import json
from functools import cache, partial
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli
from turbotts.bench import roofline
from turbotts.bench.step_profile import StepProfilePlan, int8_path, stream_windows, time_decode_steps
from turbotts.config import EngineConfig, StreamingConfig
from turbotts.cpu import int8_decode
from turbotts.engine.core import EngineCore
from turbotts.model.chattts import ChatTTSModel
from turbotts.sources import ModelSource, load_model

TINY = ("bench-steps", "--dummy-size", "tiny")


@pytest.fixture(autouse=True)
def small_bandwidth_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sum probe reads 64 MiB here, not 1 GiB (the weight-size read is the tiny model's size anyway)."""
    probe = partial(roofline.measure_bandwidth_bytes_per_s, 64 * 2**20)
    monkeypatch.setattr(roofline, "measure_bandwidth_bytes_per_s", probe)  # the command imports it when it runs


@cache
def tiny_int8() -> ChatTTSModel:
    return load_model(ModelSource(load_format="dummy", dummy_size="tiny"), quant="int8")


def test_the_json_has_every_batch_with_its_step_times_floor_and_path(tmp_path: Path) -> None:
    out, plot = tmp_path / "steps.json", tmp_path / "steps.png"
    result = run_cli(*TINY, "--batch-sizes", "2,1", "--steps", "3", "--rounds", "1", "--warmup-steps", "1",
                     "--vocoder-frames", "40", "--json", str(out), "--plot", str(plot))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Decode step by batch size" in result.stderr  # the summary table
    report: dict[str, Any] = json.loads(out.read_text())
    rows = report["batches"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    floor_ms = report["roofline"]["floor_step_ms"]
    assert floor_ms > 0 and report["roofline"]["decode_weight_bytes"] > 0
    for r in rows:
        assert r["num_steps"] == 3
        assert 0 < r["step_ms"]["min"] <= r["step_ms"]["p50"] <= r["step_ms"]["p90"]
        assert r["x_roofline"] == pytest.approx(r["step_ms"]["p50"] / floor_ms)
        assert r["frames_per_s"] == pytest.approx(1000 * r["batch_size"] / r["step_ms"]["p50"])
        assert r["vocoder_ms_per_frame"] > 0
        # attention reads every row's cache: the prompt plus the frames made so far
        assert r["cached_tokens_per_row"] > 1 and r["kv_read_bytes"] > 0
        assert r["x_roofline_with_kv"] < r["x_roofline"]
        assert r["frames_per_s_with_vocoder"] < r["frames_per_s"]  # the vocoder's time is added, not ignored
        assert r["realtime_frames_per_s"] == pytest.approx(r["batch_size"] * 24000 / 512)
        assert r["is_realtime"] == (r["frames_per_s_with_vocoder"] >= r["realtime_frames_per_s"])
        assert r["int8_path"] == int8_path(tiny_int8(), r["batch_size"])
    assert report["precision"]["quant"] == "int8"
    cpu = report["machine"]["cpu"]
    assert cpu["model"] and cpu["isa"] and "family" in cpu and "model_number" in cpu
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args",
    [
        ("--batch-sizes", "0,2"),
        ("--batch-sizes", "one"),
        ("--batch-sizes", ","),
        ("--steps", "0"),
        ("--rounds", "0"),
        ("--vocoder-frames", "3"),
        ("--quant", "int4"),
    ],
)
def test_bad_input_exits_2_with_a_message(args: tuple[str, ...], tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    result = run_cli(*TINY, *args, "--json", str(out))
    assert result.returncode == 2, result.stderr
    assert "error" in result.stderr.lower() or "invalid" in result.stderr.lower()
    assert not out.exists()


def test_the_path_named_follows_the_row_limits() -> None:
    """Up to the stack's row limit its tile kernel runs; past it, fbgemm inside the stack."""
    model = tiny_int8()
    if model.modules.gpt.fused_decode is None:
        pytest.skip("the fused int8 stack is not built here (no compiled kernels, or switched off)")
    assert int8_path(model, int8_decode.MAX_ROWS) == "fused stack + tile kernel"
    assert int8_path(model, int8_decode.MAX_ROWS + 1) == "fused stack + fbgemm"
    plain = load_model(ModelSource(load_format="dummy", dummy_size="tiny"))
    assert int8_path(plain, 1) == "no int8"


def test_decode_steps_are_pure_and_leave_the_engine_empty() -> None:
    """Every timed step decodes all rows and prefills none; the rows are aborted and their slots freed after."""
    core = EngineCore(tiny_int8(), EngineConfig(max_batch_size=3, admission="off"))
    seen: list[tuple[int, int]] = []
    step = core.step

    def recording_step() -> Any:
        outputs = step()
        assert core.last_step is not None
        seen.append((core.last_step.num_prefill, core.last_step.num_decode))
        return outputs

    core.step = recording_step  # type: ignore[method-assign]
    plan = StepProfilePlan([3], num_steps=4, num_warmup_steps=2, num_vocoder_frames=40)
    times = time_decode_steps(core, 3, plan)
    assert len(times.step_s) == 4 and all(s > 0 for s in times.step_s)
    # each timed step adds one token to each of the three rows' caches
    assert [b - a for a, b in zip(times.num_cached_tokens, times.num_cached_tokens[1:], strict=False)] == [3] * 3
    assert seen[0][0] == 3  # the prefill came first, outside the timed steps
    assert seen[1:7] == [(0, 3)] * 6  # 2 warm-up + 4 timed steps of three decoding rows
    assert all(num_decode == 0 for _, num_decode in seen[7:])  # then only the steps that free the slots
    assert not core.has_work() and core.num_unfinished == 0


def test_vocoder_windows_are_the_streamed_chunks_and_cover_the_utterance() -> None:
    streaming = StreamingConfig()
    windows = stream_windows(tiny_int8(), streaming, 128)
    assert sum(w.keep_to - w.keep_from for w in windows) == 512 * 128 - 256
    assert windows[0].keep_to == 512 * streaming.first_chunk_frames  # the first chunk is the short one
    assert windows[1].keep_to - windows[1].keep_from == 512 * streaming.chunk_frames
    assert all(w.use_decoder for w in windows)
