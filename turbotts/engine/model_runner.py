"""Runs scheduled work on the model: the only engine code that touches tensors.

It owns the device, the KV cache and per-slot sampling state (temperatures,
seeds, the repetition-penalty window). The scheduler describes a step with plain
dataclasses; the runner answers with sampled ids. It knows slots and sequences,
never requests.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from types import ModuleType

import torch

from turbotts.cpu import int8_gemv
from turbotts.cpu.extensions import load_sampler
from turbotts.cpu.quant import is_quantized
from turbotts.cpu.settings import SWITCHES, cpu_settings
from turbotts.engine.batch import DecodeItem, PrefillItem, RunnerOutput, SchedulerOutput
from turbotts.engine.cuda_graphs import StaticDecoder
from turbotts.engine.kv import KVLayout
from turbotts.engine.sampler import PENALTY_WINDOW, SamplingBatch, column_seeds, sample
from turbotts.engine.sequence import SequenceKind
from turbotts.model.attention import DecodeMetadata, DecodeStrategy, PrefillMetadata
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.gpt import GPT
from turbotts.model.speaker import apply_speaker, decode_voice, encode_voice, sample_random_voice

VOICE_CACHE_SIZE = 256
#: ``TURBOTTS_FUSED_SAMPLER=0`` samples with torch ops even where the compiled kernels are loaded (for A/B runs)
FUSED_SAMPLER_ENV = SWITCHES["fused_sampler"][0]

logger = logging.getLogger(__name__)


def sampling_kernel(model: ChatTTSModel) -> ModuleType | None:
    """The compiled sampler: for an int8 GPT on CPU (its steps are short enough for the torch
    sampler's ~0.5 ms to count), where the int8 kernels load too, unless switched off."""
    if not cpu_settings().fused_sampler or model.device.type != "cpu":
        return None
    if not is_quantized(model.modules.gpt):
        return None
    if int8_gemv.load_kernel() is None:
        return None
    kernel = load_sampler().module
    if kernel is not None:
        logger.info("sampling on the compiled CPU kernels (%s=0 samples with torch ops)", FUSED_SAMPLER_ENV)
    return kernel


@dataclass
class SlotSampling:
    """Per-slot sampling parameters, written at prefill, read by index every step."""

    temperature: torch.Tensor  # (S, num_vq) float32
    top_p: torch.Tensor  # (S, 1) float32
    top_k: torch.Tensor  # (S,) int64
    penalty: torch.Tensor  # (S, 1) float32
    min_new_tokens: torch.Tensor  # (S,) int64
    is_greedy: torch.Tensor  # (S,) bool
    seeds: torch.Tensor  # (S, num_vq) int64
    history: torch.Tensor  # (S, num_vq, PENALTY_WINDOW) int64, -1 = empty

    @classmethod
    def empty(cls, num_slots: int, num_vq: int, device: torch.device) -> SlotSampling:
        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        return cls(
            temperature=torch.ones(num_slots, num_vq, device=device),
            top_p=torch.ones(num_slots, 1, device=device),
            top_k=zeros(num_slots, dtype=torch.int64),
            penalty=torch.ones(num_slots, 1, device=device),
            min_new_tokens=zeros(num_slots, dtype=torch.int64),
            is_greedy=zeros(num_slots, dtype=torch.bool),
            seeds=zeros(num_slots, num_vq, dtype=torch.int64),
            history=torch.full((num_slots, num_vq, PENALTY_WINDOW), -1, dtype=torch.int64, device=device),
        )


def kv_cache_dtype(name: str, gpt: GPT) -> torch.dtype:
    """The KV cache's storage dtype for ``EngineConfig.kv_dtype``.

    ``auto`` is bf16 where the fused int8 decode stack runs (CPU, int8 weights, fp32 activations):
    at 16 rows and 150 cached tokens the fp32 cache is more bytes per step than the int8 weights,
    and int8 already trades exactness for speed; elsewhere the cache keeps the GPT's dtype.
    """
    if name == "fp32":
        return torch.float32
    if name == "bf16":
        return torch.bfloat16
    if name != "auto":
        raise ValueError(f"kv_dtype must be auto, fp32 or bf16, not {name!r}")
    return torch.bfloat16 if gpt.fused_decode is not None else gpt.norm.weight.dtype


class ModelRunner:
    """Executes prefill and decode for the slots the scheduler names."""

    def __init__(
        self,
        model: ChatTTSModel,
        layout: KVLayout,
        *,
        decode_mode: str = "eager",
        max_batch_size: int = 16,
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
        self.layout = layout
        self.device = model.device
        gpt_config = model.config.gpt
        self.num_vq = gpt_config.num_vq
        self.audio_vocab = gpt_config.num_audio_tokens
        self.text_vocab = gpt_config.num_text_tokens
        self.audio_eos_id = gpt_config.audio_eos_id
        self.text_eos_id = model.tokenizer.eos_id
        self.spk_emb_id = model.tokenizer.spk_emb_id
        self.gpt = model.modules.gpt
        self.embed = model.modules.embed
        self.strategy = DecodeStrategy.GATHER if self.device.type == "cuda" else DecodeStrategy.AUTO
        is_static = decode_mode in ("static", "graphs")
        # a static decoder pads batches with rows that write into one extra scratch slot
        self.cache = self.gpt.new_kv_cache(layout.num_slots + int(is_static), layout.max_seq_len, dtype=kv_dtype)
        self.slots = SlotSampling.empty(layout.num_slots, self.num_vq, self.device)
        self.static_decoder = (
            StaticDecoder(
                self.gpt,
                self.cache,
                scratch_slot=layout.num_slots,
                max_batch_size=max_batch_size,
                use_graphs=decode_mode == "graphs",
            )
            if is_static
            else None
        )
        self.sampling_kernel = sampling_kernel(model)
        # the per-row parameters of the last batch sampled (they change only when a slot is written):
        # a steady batch gathers them once, not in ~10 small ops a step (0.1-0.2 ms of a 14 ms AVX2 step)
        self._row_params: tuple[tuple[tuple[int, ...], int, int], dict[str, torch.Tensor]] | None = None
        self._slot_writes = 0
        self._voices: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._random_voices: OrderedDict[int, str] = OrderedDict()

    # -- voices -------------------------------------------------------------------

    def random_voice(self, seed: int) -> str:
        """The official string of the voice ``seed`` draws from the speaker statistics, cached by seed.

        Cached because encoding is LZMA at its slowest preset (about 0.25 s on a loaded CPU),
        paid on the engine thread by every request naming a built-in voice (``alloy`` is a seed).
        """
        if seed in self._random_voices:
            self._random_voices.move_to_end(seed)
            return self._random_voices[seed]
        voice = encode_voice(sample_random_voice(self.model.speaker_stats, seed))
        self._random_voices[seed] = voice
        if len(self._random_voices) > VOICE_CACHE_SIZE:
            self._random_voices.popitem(last=False)
        return voice

    def voice_vector(self, voice: str) -> torch.Tensor:
        """Decoded (H,) float16 voice, cached by string."""
        if voice in self._voices:
            self._voices.move_to_end(voice)
            return self._voices[voice]
        vector = decode_voice(voice, self.model.config.gpt.hidden_size)
        self._voices[voice] = vector
        if len(self._voices) > VOICE_CACHE_SIZE:
            self._voices.popitem(last=False)
        return vector

    # -- one engine step ----------------------------------------------------------

    @torch.inference_mode()
    def execute(self, work: SchedulerOutput) -> RunnerOutput:
        seq_ids: list[int] = []
        sampled: list[list[int]] = []
        hiddens: list[torch.Tensor] = []
        if work.prefill:
            ids, hidden = self._prefill(work.prefill)
            seq_ids += [item.seq_id for item in work.prefill]
            sampled += ids
            hiddens.append(hidden)
        if work.decode:
            ids, hidden = self._decode(work.decode)
            seq_ids += [item.seq_id for item in work.decode]
            sampled += ids
            hiddens.append(hidden)
        hidden_all = hiddens[0] if len(hiddens) == 1 else torch.cat(hiddens) if hiddens else None
        return RunnerOutput(seq_ids=seq_ids, sampled=sampled, hidden=hidden_all)

    def _prefill(self, items: list[PrefillItem]) -> tuple[list[list[int]], torch.Tensor]:
        for item in items:
            self._write_slot_sampling(item)
        lengths = [item.num_prompt_tokens for item in items]
        max_len = max(lengths)
        ids = torch.zeros(len(items), max_len, dtype=torch.int64)
        for row, item in enumerate(items):
            ids[row, : len(item.prompt_ids)] = torch.tensor(item.prompt_ids)
        ids = ids.to(self.device)  # (B, L) right-padded; 0 at audio-prompt positions
        emb = self._embed_audio_prompts(self.embed.embed_text_ids(ids), items)  # (B, L, H)
        voiced = [row for row, item in enumerate(items) if item.voice is not None]
        if voiced:
            voices = torch.zeros(len(items), emb.shape[-1], dtype=torch.float16)
            for row in voiced:
                voices[row] = self.voice_vector(items[row].voice or "")
            emb = apply_speaker(emb, ids, self.spk_emb_id, voices)
        # every prompt back to back in one row: the matmuls see real tokens only, no padding
        positions = torch.arange(max_len, device=self.device).expand(len(items), max_len)  # (B, L)
        is_token = positions < torch.tensor(lengths, device=self.device)[:, None]  # (B, L)
        meta = PrefillMetadata.build([item.slot for item in items], lengths, is_packed=True)
        hidden = self.gpt.prefill(emb[is_token][None], positions[is_token][None], meta, self.cache)  # (1, T, H)
        last = torch.tensor([o + n - 1 for o, n in zip(meta.token_offsets, lengths, strict=True)], device=self.device)
        last_hidden = hidden[0, last]  # (B, H)
        steps = [0] * len(items)
        return self._sample(
            last_hidden, [item.slot for item in items], [item.kind for item in items], steps
        ), last_hidden

    def _embed_audio_prompts(self, emb: torch.Tensor, items: list[PrefillItem]) -> torch.Tensor:
        """Put each reference clip's code embeddings after its text (the official ``[Ptts]`` + codes layout)."""
        for row, item in enumerate(items):
            if item.prompt_codes:
                start = len(item.prompt_ids)
                codes = torch.tensor(item.prompt_codes, dtype=torch.int64, device=self.device)  # (P, num_vq)
                emb[row, start : start + codes.size(0)] = self.embed.embed_codes(codes).to(emb.dtype)
        return emb

    def _decode(self, items: list[DecodeItem]) -> tuple[list[list[int]], torch.Tensor]:
        emb = torch.empty(
            len(items), self.gpt.config.hidden_size, dtype=self.embed.emb_text.weight.dtype, device=self.device
        )  # (B, H)
        code_rows = [row for row, item in enumerate(items) if item.kind is SequenceKind.CODE]
        text_rows = [row for row, item in enumerate(items) if item.kind is SequenceKind.TEXT]
        if code_rows:
            codes = torch.tensor([items[row].last_ids for row in code_rows], device=self.device)  # (Bc, num_vq)
            emb[code_rows] = self.embed.embed_codes(codes)
        if text_rows:
            text_ids = torch.tensor([items[row].last_ids[0] for row in text_rows], device=self.device)  # (Bt,)
            emb[text_rows] = self.embed.embed_text_ids(text_ids)
        slots = [item.slot for item in items]
        positions = [item.position for item in items]
        if self.static_decoder is not None:
            hidden = self.static_decoder.decode(emb, positions, slots)  # (B, H)
        else:
            # the fused int8 stack reads slots and lengths only: no masks to build for it (0.1 ms a step)
            fused = self.gpt.fused_decode
            is_fused = fused is not None and fused.accepts(emb, self.cache)
            strategy = DecodeStrategy.PER_SLOT if is_fused else self.strategy
            meta = DecodeMetadata.build(slots, positions, self.device, strategy)
            hidden = self.gpt.decode(emb, torch.tensor(positions, device=self.device), meta, self.cache)  # (B, H)
        return self._sample(hidden, slots, [item.kind for item in items], [item.step for item in items]), hidden

    # -- sampling -----------------------------------------------------------------

    def _write_slot_sampling(self, item: PrefillItem) -> None:
        s, p = self.slots, item.sampling
        num_columns = self.num_vq if item.kind is SequenceKind.CODE else 1
        temps = list(p.temperatures(num_columns)) + [1.0] * (self.num_vq - num_columns)
        s.temperature[item.slot] = torch.tensor(temps)
        s.top_p[item.slot] = p.top_p
        s.top_k[item.slot] = p.top_k
        s.penalty[item.slot] = p.repetition_penalty
        s.min_new_tokens[item.slot] = p.min_new_tokens
        s.is_greedy[item.slot] = p.greedy
        s.seeds[item.slot] = torch.tensor(column_seeds(item.seed, self.num_vq))
        s.history[item.slot] = -1
        self._slot_writes += 1

    def _sample(
        self, hidden: torch.Tensor, slots: list[int], kinds: list[SequenceKind], steps: list[int]
    ) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in slots]
        for kind in (SequenceKind.CODE, SequenceKind.TEXT):
            rows = [row for row, k in enumerate(kinds) if k is kind]
            if not rows:
                continue
            rows_hidden = hidden if len(rows) == len(kinds) else hidden[torch.tensor(rows, device=self.device)]
            row_slots = tuple(slots[r] for r in rows)
            slot_t = torch.tensor(row_slots, device=self.device)
            step_t = torch.tensor([steps[r] for r in rows], device=self.device)
            if kind is SequenceKind.CODE:
                logits = self.embed.code_logits(rows_hidden).flatten(0, 1)  # (Bc * num_vq, V)
                ids = self._sample_rows(
                    logits, row_slots, slot_t, step_t, self.num_vq, self.audio_vocab, self.audio_eos_id
                )
                ids = ids.view(len(rows), self.num_vq)  # (Bc, num_vq)
            else:
                logits = self.embed.text_logits(rows_hidden)  # (Bt, V_text)
                ids = self._sample_rows(logits, row_slots, slot_t, step_t, 1, self.text_vocab, self.text_eos_id)
                ids = ids.view(len(rows), 1)
            self._remember(slot_t, step_t, ids)
            for row, row_ids in zip(rows, ids.tolist(), strict=True):
                out[row] = row_ids
        return out

    def _sample_rows(
        self,
        logits: torch.Tensor,
        row_slots: tuple[int, ...],
        slot_t: torch.Tensor,
        step_t: torch.Tensor,
        num_columns: int,
        vocab: int,
        eos: int,
    ) -> torch.Tensor:
        s = self.slots
        params = self._params_of_rows(row_slots, slot_t, num_columns)
        history = s.history[slot_t, :num_columns].flatten(0, 1)  # (R, W)
        batch = SamplingBatch(
            temperature=params["temperature"],
            repetition_penalty=params["repetition_penalty"],
            top_p=params["top_p"],
            top_k=params["top_k"],
            history=history.masked_fill(history < 0, vocab),
            ban_eos=(step_t < params["min_new_tokens"]).repeat_interleave(num_columns),
            is_greedy=params["is_greedy"],
            seeds=params["seeds"],
            steps=step_t.repeat_interleave(num_columns),
        )
        return sample(logits, batch, eos, self.sampling_kernel)

    def _params_of_rows(
        self, row_slots: tuple[int, ...], slot_t: torch.Tensor, num_columns: int
    ) -> dict[str, torch.Tensor]:
        """The fixed sampling parameters of these rows, one per (row, column); reused while no slot is rewritten."""
        key = (row_slots, num_columns, self._slot_writes)
        if self._row_params is not None and self._row_params[0] == key:
            return self._row_params[1]
        s = self.slots
        params = {
            "temperature": s.temperature[slot_t, :num_columns].reshape(-1, 1),
            "repetition_penalty": s.penalty[slot_t].repeat_interleave(num_columns, dim=0),
            "top_p": s.top_p[slot_t].repeat_interleave(num_columns, dim=0),
            "top_k": s.top_k[slot_t].repeat_interleave(num_columns),
            "min_new_tokens": s.min_new_tokens[slot_t],
            "is_greedy": s.is_greedy[slot_t].repeat_interleave(num_columns),
            "seeds": s.seeds[slot_t, :num_columns].reshape(-1),
        }
        self._row_params = (key, params)
        return params

    def _remember(self, slot_t: torch.Tensor, step_t: torch.Tensor, ids: torch.Tensor) -> None:
        """Write the new ids into each slot's repetition-penalty ring buffer."""
        num_columns = ids.shape[1]
        self.slots.history[slot_t, :num_columns, step_t % PENALTY_WINDOW] = ids  # (R, num_columns)
