"""`turbotts bench` end to end on the tiny model: the JSON contract and the plot.

One run goes through a real subprocess (the entry point); the others call the same ``main`` in this
process (:mod:`tests.cli_runner`), each with the fewest requests, frames and modes its assertions need.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import CliRun, run_cli, run_subprocess
from turbotts.bench import roofline
from turbotts.cpu.extensions import load_kernels
from turbotts.cpu.variants import VARIANTS

REQUIRED = (
    "throughput_audio_s_per_s",
    "rtf",
    "ttfa_s",
    "latency_s",
    "peak_rss_bytes",
    "step_ms_by_batch",
    "roofline_ratio",
)
TINY = ("bench", "--dummy-size", "tiny")


@pytest.fixture(autouse=True)
def small_bandwidth_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs read 64 MiB, not 1 GiB, to measure the memory bandwidth (the subprocess run reads 1 GiB)."""
    probe = partial(roofline.measure_bandwidth_bytes_per_s, 64 * 2**20)
    monkeypatch.setattr(roofline, "measure_bandwidth_bytes_per_s", probe)  # the command imports it when it runs


def run_bench(*args: str) -> CliRun:
    return run_cli(*TINY, *args)


def bench_report(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    result = run_bench(*args, "--json", str(out))
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_poisson_arrivals_through_the_real_entry_point(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    result = run_subprocess(*TINY, "--mode", "continuous", "--num-requests", "4", "--request-rate", "20",
                            "--output-len", "10", "--quant", "none", "--json", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "TurboTTS bench" in result.stderr  # the summary table
    report = json.loads(out.read_text())
    assert report["config"]["request_rate"] == 20 and report["num_requests"] == 4
    assert report["memory_bandwidth_gb_s"] > 0  # the full-size bandwidth probe


def test_bench_writes_the_documented_json_and_a_png(tmp_path: Path) -> None:
    plot = tmp_path / "b.png"
    modes = "sequential,static,continuous"
    report = bench_report(tmp_path, "b", "--mode", modes, "--num-requests", "3", "--concurrency", "1,3",
                          "--output-len", "6:12", "--plot", str(plot), "--quant", "none")  # fmt: skip
    for key in REQUIRED:
        assert key in report, key
    for key in ("ttfa_s", "latency_s"):
        assert report[key]["p50"] is not None and report[key]["p99"] >= report[key]["p50"]
    assert len(report["runs"]) == 6
    assert {r["mode"] for r in report["runs"]} == {"sequential", "static", "continuous"}
    assert all(r["num_requests"] == 3 and r["audio_s"] > 0 for r in report["runs"])
    assert "continuous_over_sequential_c3" in report["ratios"]
    # identical work in every mode: fixed output lengths, EOS ignored
    assert len({round(r["audio_s"], 6) for r in report["runs"]}) == 1
    assert "1" in report["runs"][0]["step_ms_by_batch"]
    assert report["roofline_ratio"] > 0 and report["peak_rss_bytes"] > 0
    if report["weight_size_read_gb_s"] is not None:  # the compiled kernels built here
        want = report["batch1_step_ms"] / 1000 * report["weight_size_read_gb_s"] * 1e9 / report["decode_weight_bytes"]
        assert report["weight_size_read_ratio"] == pytest.approx(want)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_reports_fp32_and_auto_quant_with_the_isa_and_the_choice(tmp_path: Path) -> None:
    report = bench_report(tmp_path, "q", "--mode", "continuous", "--num-requests", "1", "--concurrency", "1",
                          "--output-len", "4")  # fmt: skip
    assert report["machine"]["cpu"]["isa"] in ("amx", "avx512_bf16", "avx512_vnni", "avx512", "avx2", "baseline")
    assert set(report["probes_by_quant"]) == {"none", "auto"}  # int8 changes numerics: bench reports both
    for probe in report["probes_by_quant"].values():
        precision = probe["precision"]
        assert precision["isa"] == report["machine"]["cpu"]["isa"]
        assert precision["dtype"] in ("fp32", "bf16") and precision["quant"] in ("none", "int8")
        assert precision["reasons"]  # auto says why it chose
    assert report["probes_by_quant"]["none"]["precision"]["quant"] == "none"
    assert report["probes_by_quant"]["none"]["int8_prefill"] is None  # no int8 weights, nothing to choose
    auto = report["probes_by_quant"]["auto"]
    if auto["precision"]["quant"] == "int8":  # which matmul runs prefill-sized int8 calls, and why
        assert auto["int8_prefill"]["matmul"] in ("onednn", "fbgemm") and auto["int8_prefill"]["reason"]
    assert {r["quant"] for r in report["runs"]} == {"none", "auto"}
    gate = auto["precision"]["gate"]  # auto went through the quality gate, which says what it measured
    assert [v["mode"] for v in gate][:1] in (["int8"], ["bf16"], []) and auto["precision"]["gate_seconds"] >= 0
    if gate and gate[0]["mode"] == "int8":
        assert gate[0]["is_adopted"] == (auto["precision"]["quant"] == "int8")


@pytest.mark.usefixtures("int8_kernel")
def test_the_json_names_the_kernel_build_in_use(tmp_path: Path) -> None:
    report = bench_report(tmp_path, "k", "--quant", "int8", "--mode", "continuous", "--num-requests", "1",
                          "--concurrency", "1", "--output-len", "4")  # fmt: skip
    kernels = report["machine"]["cpu_kernels"]
    assert kernels == report["probes_by_quant"]["int8"]["cpu_kernels"] == load_kernels().report()
    assert kernels["source"] == "prebuilt" and kernels["variant"] in {v.name for v in VARIANTS}


def test_max_prefill_tokens_spreads_the_prefill_of_requests_arriving_together(tmp_path: Path) -> None:
    """All prompts in one step start (and end) together; one prompt per step staggers the batch."""
    batch_sizes = {}
    for tokens in ("4096", "1"):
        report = bench_report(tmp_path, f"prefill_{tokens}", "--mode", "continuous", "--num-requests", "3",
                              "--concurrency", "3", "--output-len", "12", "--quant", "none",
                              "--max-prefill-tokens", tokens)  # fmt: skip
        assert report["config"]["max_prefill_tokens"] == int(tokens)
        batch_sizes[tokens] = set(report["runs"][0]["step_ms_by_batch"])
    assert batch_sizes["4096"] == {"3"}
    assert batch_sizes["1"] == {"1", "2", "3"}


def test_no_stream_asks_for_each_utterance_whole(tmp_path: Path) -> None:
    """Streamed audio starts before the utterance ends; whole audio (one decode at the end) only when it ends."""
    reports = {}
    for flag in ("--stream", "--no-stream"):
        # 24 frames: the first chunk (4 frames, 8 of lookahead) leaves at frame 12, well before the end
        reports[flag] = bench_report(tmp_path, flag, "--mode", "sequential", "--num-requests", "1", "--concurrency",
                                     "1", "--output-len", "24", "--quant", "none", flag)  # fmt: skip
    streamed, whole = reports["--stream"], reports["--no-stream"]
    assert streamed["config"]["is_streaming"] is True and whole["config"]["is_streaming"] is False
    assert streamed["ttfa_s"]["p50"] < streamed["latency_s"]["p50"]
    assert whole["ttfa_s"]["p50"] == whole["latency_s"]["p50"]
    assert whole["audio_s"] == streamed["audio_s"]  # the same work either way


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--mode", "turbo", "--concurrency", "2"), "--mode"),
        (("--concurrency", "2", "--request-rate", "3"), "exactly one"),
        (("--concurrency", "2", "--output-len", "9:3"), "MIN:MAX"),
        (("--concurrency", "2", "--first-chunk-lookahead-frames", "-1"), "cannot be negative"),
        (("--concurrency", "2", "--max-prefill-tokens", "0"), "--max-prefill-tokens"),
    ],
)
def test_bad_options_exit_2(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    result = run_bench(*args, "--json", str(tmp_path / "x.json"))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.json").exists()


def test_quant_modes_compared_in_one_run(tmp_path: Path) -> None:
    report = bench_report(tmp_path, "q", "--mode", "continuous", "--num-requests", "2", "--concurrency", "2",
                          "--output-len", "8", "--quant", "none,int8", "--dtype", "fp32")  # fmt: skip
    assert [r["quant"] for r in report["runs"]] == ["none", "int8"]
    assert report["ratios"]["int8_over_none_continuous_c2"] > 0
    probes = report["probes_by_quant"]
    assert probes["int8"]["decode_weight_bytes"] < 0.35 * probes["none"]["decode_weight_bytes"]
    assert probes["none"]["int8_kernel_cached_gb_s"] is None  # no int8 kernel in an fp32 model
    assert probes["none"]["int8_tiles_huge_page_bytes"] is None
    if probes["int8"]["int8_kernel"] not in (None, "fbgemm"):  # counted (a tiny model's tiles fill no 2 MiB page)
        assert isinstance(probes["int8"]["int8_tiles_huge_page_bytes"], int) == (sys.platform == "linux")
    if probes["int8"]["int8_kernel"] not in (None, "fbgemm"):  # the kernel's own floor on cached weights
        int8 = probes["int8"]
        want = int8["batch1_step_ms"] / 1000 * int8["int8_kernel_cached_gb_s"] * 1e9 / int8["decode_weight_bytes"]
        assert int8["int8_kernel_cached_gb_s"] > 0 and int8["int8_kernel_cached_ratio"] == pytest.approx(want)
