"""``auto`` precision with a quality gate: a faster mode is adopted only where it matches fp32 on the
weights actually loaded.

Why: ``--quant auto`` used to pick int8 wherever it was faster, on speed alone, so serving took it
only when asked. Gated, it can be the default: at start-up the fp32 model speaks a few fixed
sentences greedily, then each faster candidate (int8 or bf16 for the GPT, bf16 for the audio
decoders) reruns the same codes (teacher forcing), and it is adopted only where its top-1 code
agreement and the MCD of its audio against fp32 pass :class:`GateThresholds`. Explicit modes
(``--quant none``, the bit-exact one, or ``int8``) are never gated.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from turbotts.cpu.bf16_weights import bf16_audio_decoders
from turbotts.cpu.precision import Precision, resolve_precision
from turbotts.cpu.quant import quantize_gpt
from turbotts.fidelity.agreement import code_agreement
from turbotts.fidelity.forward import greedy_codes, prompt_ids, teacher_forced
from turbotts.fidelity.mcd import mcd_db
from turbotts.fidelity.thresholds import GateThresholds
from turbotts.model.chattts import ChatTTSModel, ChatTTSModules

logger = logging.getLogger(__name__)

#: fixed, short, two languages: what the gate speaks (kept small: the gate runs at every start)
GATE_TEXTS = ("Hello, this is a short test of the speech model.", "今天天气很好，我们去公园散步吧。")
GATE_FRAMES = 24


@dataclass(frozen=True)
class Verdict:
    """One candidate mode as measured by the gate."""

    mode: str
    code_agreement: float | None
    mcd_db: float
    is_adopted: bool

    def describe(self) -> str:
        agreement = "" if self.code_agreement is None else f"code agreement {self.code_agreement:.3f}, "
        return f"{self.mode} {'adopted' if self.is_adopted else 'refused'} ({agreement}MCD {self.mcd_db:.2f} dB)"


@dataclass(frozen=True)
class GatedPrecision:
    """The modes chosen, the gate's verdicts and its cost (for the log, ``/metrics`` and bench JSON)."""

    precision: Precision
    verdicts: tuple[Verdict, ...]
    seconds: float

    def report(self) -> dict[str, object]:
        return {**self.precision.report(), "gate_seconds": self.seconds,
                "gate": [dataclasses.asdict(v) for v in self.verdicts]}  # fmt: skip


@dataclass
class _Reference:
    codes: list[torch.Tensor]
    logits: list[torch.Tensor]
    hidden: list[torch.Tensor]
    audio: list[np.ndarray]


def _audio(modules: ChatTTSModules, hidden: torch.Tensor, *, is_bf16: bool) -> np.ndarray:
    """(T, H) hidden states -> waveform, through the Decoder and Vocos as the engine runs them."""
    decoder, _, vocos = bf16_audio_decoders(modules) if is_bf16 else (modules.decoder, None, modules.vocos)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=is_bf16):
        mel = decoder.decode(hidden[None].float().transpose(1, 2))
        return vocos.decode(mel.float()).float()[0].numpy()


def _measure(model: ChatTTSModel, prompts: list[torch.Tensor], codes: list[torch.Tensor] | None) -> _Reference:
    measured = _Reference([], [], [], [])
    for index, prompt in enumerate(prompts):
        text_codes = greedy_codes(model, prompt, GATE_FRAMES) if codes is None else codes[index]
        logits, hidden = teacher_forced(model, prompt, text_codes)
        measured.codes.append(text_codes)
        measured.logits.append(logits)
        measured.hidden.append(hidden)
        measured.audio.append(_audio(model.modules, hidden, is_bf16=False))
    return measured


def _mean_mcd(reference: list[np.ndarray], test: list[np.ndarray], sample_rate_hz: int) -> float:
    return float(np.mean([mcd_db(r, t, sample_rate_hz) for r, t in zip(reference, test, strict=True)]))


def _with_gpt(model: ChatTTSModel, mode: str) -> ChatTTSModel:
    """A model sharing ``model``'s audio decoders, with a copy of its GPT and heads in ``mode``."""
    modules = copy.copy(model.modules)
    modules._modules = dict(model.modules._modules)  # nn.Module keeps children in this dict: not shared
    modules.gpt, modules.embed = copy.deepcopy(model.modules.gpt), copy.deepcopy(model.modules.embed)
    if mode == "int8":
        quantize_gpt(modules, "int8")
        return dataclasses.replace(model, modules=modules)
    modules.gpt.to(torch.bfloat16).fuse()
    modules.embed.to(torch.bfloat16).fuse()
    return dataclasses.replace(model, modules=modules, dtype=torch.bfloat16)


@torch.inference_mode()
def gate_precision(
    model: ChatTTSModel, dtype: str, quant: str, vocoder_dtype: str, thresholds: GateThresholds
) -> tuple[ChatTTSModel, GatedPrecision]:
    """Resolve ``auto`` modes for ``model`` (loaded in fp32, fused): the speed probe proposes, the gate
    disposes. Returns the model in the chosen GPT mode and what was chosen and why."""
    started = time.perf_counter()
    proposed = resolve_precision(dtype, quant, vocoder_dtype, model.device.type)
    gpt_mode = "int8" if quant == "auto" and proposed.quant == "int8" else None
    if gpt_mode is None and dtype == "auto" and proposed.dtype == "bf16":
        gpt_mode = "bf16"
    wants_bf16_vocoder = vocoder_dtype == "auto" and proposed.vocoder_dtype == "bf16"
    chosen = dataclasses.replace(  # each auto mode stays fp32 until the gate adopts its candidate
        proposed, dtype="fp32" if dtype == "auto" else proposed.dtype,
        quant="none" if quant == "auto" else proposed.quant,
        vocoder_dtype="fp32" if vocoder_dtype == "auto" else proposed.vocoder_dtype,
    )  # fmt: skip
    if gpt_mode is None and not wants_bf16_vocoder:
        return model, GatedPrecision(proposed, (), time.perf_counter() - started)
    prompts = [prompt_ids(model, text) for text in GATE_TEXTS]
    reference = _measure(model, prompts, None)
    verdicts, reasons = [], list(proposed.reasons)
    if gpt_mode is not None:
        model.modules.gpt.unfuse()
        model.modules.embed.unfuse()
        candidate = _with_gpt(model, gpt_mode)
        measured = _measure(candidate, prompts, reference.codes)
        agreement = code_agreement(torch.cat(reference.logits), torch.cat(measured.logits))
        mcd = _mean_mcd(reference.audio, measured.audio, model.sample_rate_hz)
        is_adopted = agreement >= thresholds.min_code_agreement and mcd <= thresholds.max_mcd_db
        verdicts.append(Verdict(gpt_mode, agreement, mcd, is_adopted))
        if is_adopted:
            model = candidate
            if gpt_mode == "int8":
                chosen = dataclasses.replace(chosen, quant="int8")
            else:
                chosen = dataclasses.replace(chosen, dtype="bf16")
        else:
            model.modules.gpt.fuse()
            model.modules.embed.fuse()
    if wants_bf16_vocoder:
        audio = [_audio(model.modules, hidden, is_bf16=True) for hidden in reference.hidden]
        mcd = _mean_mcd(reference.audio, audio, model.sample_rate_hz)
        verdicts.append(Verdict("vocoder bf16", None, mcd, mcd <= thresholds.max_mcd_db))
        if verdicts[-1].is_adopted:
            chosen = dataclasses.replace(chosen, vocoder_dtype="bf16")
    reasons += [f"quality gate: {v.describe()}" for v in verdicts]
    gated = GatedPrecision(dataclasses.replace(chosen, reasons=tuple(reasons)), tuple(verdicts),
                           time.perf_counter() - started)  # fmt: skip
    return model, gated
