"""quant-sweep and quality check through the CLI on tiny weights (in this process: :mod:`tests.cli_runner`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.cli_runner import run_cli
from tests.golden import FIXTURE_DIR

TINY = ["--load-format", "dummy", "--dummy-size", "tiny"]
SENTENCE = "The quick brown fox jumps over the lazy dog."


def test_quant_sweep_writes_reports(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{SENTENCE}\n")  # one sentence: each mode is probed in a subprocess of its own
    result = run_cli("quant-sweep", *TINY, "--modes", "fp32,int8", "--num-frames", "8", "--texts", str(texts),
                     "--json", str(out / "s.json"), "--csv", str(out / "s.csv"),
                     "--plot", str(out / "s.png"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "dummy" in result.stderr  # the random-weights warning
    report = json.loads((out / "s.json").read_text())
    assert report["texts"] == [SENTENCE]
    assert set(report["modes"]) == {"fp32", "int8"}
    for row in report["modes"].values():
        for key in ("weight_bytes", "step_ms_batch1", "step_ms_batch16", "code_agreement", "kl", "mcd_db"):
            assert key in row
    assert report["modes"]["fp32"]["mcd_db"] == 0.0 and report["modes"]["fp32"]["code_agreement"] == 1.0
    assert report["modes"]["int8"]["weight_bytes"] < 0.3 * report["modes"]["fp32"]["weight_bytes"]
    assert (out / "s.csv").read_text().splitlines()[0].startswith("mode,weight_bytes")
    assert (out / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_quant_sweep_rejects_unknown_mode(tmp_path: Path) -> None:
    result = run_cli("quant-sweep", *TINY, "--modes", "int4", "--json", str(tmp_path / "x.json"))
    assert result.returncode == 2
    assert "int4" in result.stderr and "Traceback" not in result.stderr


def _check(baseline: Path, *extra: str) -> int:
    result = run_cli("quality", "check", "--baseline", str(baseline), "--max-new-tokens", "16", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode


def test_quality_check_passes_against_itself_and_fails_otherwise(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.npz"
    assert _check(baseline, "--write-baseline", *TINY) == 0
    assert _check(baseline, *TINY) == 0  # the same model reproduces its baseline: MCD 0
    # other weights: a large MCD
    assert _check(baseline, "--checkpoint", str(FIXTURE_DIR)) == 1
    # a corrupted baseline: every stored cepstrum shifted
    with np.load(baseline) as data:
        arrays = {k: data[k] for k in data.files}
    for key in arrays:
        if key.startswith("cepstra_"):
            arrays[key] = arrays[key] + 0.5
    corrupted = tmp_path / "corrupted.npz"
    with corrupted.open("wb") as f:
        np.savez(f, **arrays)
    assert _check(corrupted, *TINY) == 1


def test_quality_check_bad_input(tmp_path: Path) -> None:
    assert _check(tmp_path / "missing.npz", *TINY) == 2
    (tmp_path / "junk.npz").write_bytes(b"not a baseline")
    assert _check(tmp_path / "junk.npz", *TINY) == 2
