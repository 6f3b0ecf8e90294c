"""The quality gate of ``auto``: a faster mode is adopted only where it matches fp32 on these weights.

Every test loads the tiny random checkpoint (the official layout) and runs the real gate: the speed
probe, greedy fp32 codes, teacher forcing through a quantized copy, and MCD of decoded audio.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import torch

from tests.server.conftest import running_server
from turbotts import TTS
from turbotts.cpu import quant
from turbotts.cpu.info import cpu_info
from turbotts.cpu.quant import is_quantized
from turbotts.fidelity import gate
from turbotts.fidelity.thresholds import GateThresholds
from turbotts.model.chattts import ChatTTSModules
from turbotts.sources import ModelSource, load_model_gated

TINY = ModelSource(load_format="dummy", dummy_size="tiny")
#: the gate proposes int8 only where the speed probe finds it faster, which needs AVX2 (our kernel) or VNNI
needs_int8 = pytest.mark.skipif("avx2" not in cpu_info().flags, reason="int8 is never proposed without AVX2")


@needs_int8
@pytest.mark.usefixtures("int8_kernel")
def test_auto_adopts_int8_exactly_when_it_passes_the_thresholds(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="turbotts.sources"):
        model, gated = load_model_gated(TINY, dtype="auto", quant="auto", vocoder_dtype="fp32")
    (verdict,) = gated.verdicts
    thresholds = GateThresholds()
    assert verdict.mode == "int8" and verdict.code_agreement is not None
    passes = verdict.code_agreement >= thresholds.min_code_agreement and verdict.mcd_db <= thresholds.max_mcd_db
    assert verdict.is_adopted == passes
    assert is_quantized(model.modules.gpt) == passes and gated.precision.quant == ("int8" if passes else "none")
    assert gated.seconds > 0 and "quality gate: int8" in caplog.text  # the log says what and why
    report = gated.report()
    assert report["gate"][0]["mode"] == "int8" and report["gate_seconds"] == gated.seconds  # type: ignore[index]


@needs_int8
def test_a_mode_under_the_thresholds_is_refused_and_the_model_stays_fp32() -> None:
    strict = GateThresholds(min_code_agreement=1.01)  # no mode can agree more than fully
    model, gated = load_model_gated(TINY, dtype="auto", quant="auto", vocoder_dtype="fp32", thresholds=strict)
    (verdict,) = gated.verdicts
    assert not verdict.is_adopted and gated.precision.quant == "none"
    assert not is_quantized(model.modules.gpt) and model.modules.gpt.is_fused  # fp32, fused again for speed
    assert any("int8 refused" in reason for reason in gated.precision.reasons)


@needs_int8
def test_a_broken_int8_mode_is_refused_at_the_default_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's purpose: int8 with wrong scales (a real failure mode of quantization) never serves."""
    real = quant.quantize_gpt

    def with_wrong_scales(modules: ChatTTSModules, mode: str) -> None:
        """Quantize with each output channel's scale off by a factor of 0.2 to 3 (the GPT is the gate's copy)."""
        for module in modules.gpt.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.mul_(torch.linspace(0.2, 3.0, module.weight.shape[0])[:, None])
        real(modules, mode)

    monkeypatch.setattr(gate, "quantize_gpt", with_wrong_scales)
    _, gated = load_model_gated(TINY, dtype="auto", quant="auto", vocoder_dtype="fp32")
    (verdict,) = gated.verdicts
    assert not verdict.is_adopted and gated.precision.quant == "none", verdict


def test_explicit_modes_are_never_gated() -> None:
    model, gated = load_model_gated(TINY, dtype="fp32", quant="none", vocoder_dtype="fp32")
    assert gated.verdicts == () and gated.seconds == 0.0
    assert (gated.precision.dtype, gated.precision.quant) == ("fp32", "none") and not is_quantized(model.modules.gpt)


@needs_int8
@pytest.mark.usefixtures("int8_kernel")
def test_the_server_defaults_to_auto_and_exports_the_choice_and_the_kernels(tmp_path: Path) -> None:
    with running_server(tmp_path, dtype="auto", quant="auto", vocoder_dtype="auto") as (url, _):
        speech = httpx.post(f"{url}/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "alloy"},
                            timeout=60)  # fmt: skip
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert speech.status_code == 200 and len(speech.content) > 44
    kernel_lines = [line for line in metrics.splitlines() if line.startswith("turbotts_cpu_kernel_info{")]
    assert len(kernel_lines) == 1 and 'source="prebuilt"' in kernel_lines[0] and kernel_lines[0].endswith(" 1.0")
    assert any(line.startswith("turbotts_precision_info{") for line in metrics.splitlines())
    assert 'turbotts_precision_gate_adopted{mode="int8"}' in metrics
    gate_seconds = [line for line in metrics.splitlines() if line.startswith("turbotts_precision_gate_seconds ")]
    assert gate_seconds and float(gate_seconds[0].split()[1]) > 0


def test_the_python_api_decodes_audio_in_the_vocoder_mode_the_gate_chose() -> None:
    tts = TTS.load(TINY, dtype="fp32", quant="none", vocoder_dtype="auto")
    _, gated = load_model_gated(TINY, dtype="fp32", quant="none", vocoder_dtype="auto")
    assert tts.engine.vocoder_dtype == gated.precision.vocoder_dtype
    assert [v.mode for v in gated.verdicts] in ([], ["vocoder bf16"])  # bf16 is proposed only where native
