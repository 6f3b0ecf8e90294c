"""Runs scheduled work on the model: the only engine code that touches tensors.

It owns the device, the KV cache and the step itself: embed, prefill or decode, sample. The scheduler
describes a step with plain dataclasses; the runner answers with sampled ids. It knows slots and
sequences, never requests. Its helpers each keep one job: :mod:`turbotts.engine.sampling_state`
(per-slot sampling parameters), :mod:`turbotts.engine.runner_voices` (speaker embeddings) and
:mod:`turbotts.engine.decode_path` (which sampler, attention strategy and KV dtype this device uses).
"""

from __future__ import annotations

import torch

from turbotts.engine.batch import DecodeItem, PrefillItem, RunnerOutput, SchedulerOutput
from turbotts.engine.cuda_graphs import StaticDecoder
from turbotts.engine.decode_path import decode_strategy, sampling_kernel
from turbotts.engine.kv import KVLayout
from turbotts.engine.runner_voices import RunnerVoices
from turbotts.engine.sampler import sample
from turbotts.engine.sampling_state import SamplingState
from turbotts.engine.sequence import SequenceKind
from turbotts.model.attention_metadata import DecodeMetadata, DecodeStrategy, PrefillMetadata
from turbotts.model.chattts import ChatTTSModel


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
        self.gpt = model.modules.gpt
        self.embed = model.modules.embed
        self.strategy = decode_strategy(self.device)
        is_static = decode_mode in ("static", "graphs")
        # a static decoder pads batches with rows that write into one extra scratch slot
        self.cache = self.gpt.new_kv_cache(layout.num_slots + int(is_static), layout.max_seq_len, dtype=kv_dtype)
        self.sampling = SamplingState(layout.num_slots, self.num_vq, self.device)
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
        self.voices = RunnerVoices(model.speaker_stats, gpt_config.hidden_size, model.tokenizer.spk_emb_id)

    def random_voice(self, seed: int) -> str:
        """The official string of the voice ``seed`` draws (see :meth:`RunnerVoices.random_voice`)."""
        return self.voices.random_voice(seed)

    def voice_vector(self, voice: str) -> torch.Tensor:
        """Decoded (H,) float16 voice, cached by string (raises ``VoiceError`` on a bad string)."""
        return self.voices.vector(voice)

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
            self.sampling.write(item)
        lengths = [item.num_prompt_tokens for item in items]
        max_len = max(lengths)
        ids = torch.zeros(len(items), max_len, dtype=torch.int64)
        for row, item in enumerate(items):
            ids[row, : len(item.prompt_ids)] = torch.tensor(item.prompt_ids)
        ids = ids.to(self.device)  # (B, L) right-padded; 0 at audio-prompt positions
        emb = self._embed_audio_prompts(self.embed.embed_text_ids(ids), items)  # (B, L, H)
        emb = self.voices.apply(emb, ids, items)
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
            # the fused int8 stack reads slots and lengths only: no masks to build for it (a few small ops a step)
            fused = self.gpt.fused_decode
            is_fused = fused is not None and fused.accepts(emb, self.cache)
            strategy = DecodeStrategy.PER_SLOT if is_fused else self.strategy
            meta = DecodeMetadata.build(slots, positions, self.device, strategy)
            hidden = self.gpt.decode(emb, torch.tensor(positions, device=self.device), meta, self.cache)  # (B, H)
        return self._sample(hidden, slots, [item.kind for item in items], [item.step for item in items]), hidden

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
                batch = self.sampling.batch(row_slots, slot_t, step_t, self.num_vq, self.audio_vocab)
                ids = sample(logits, batch, self.audio_eos_id, self.sampling_kernel)
                ids = ids.view(len(rows), self.num_vq)  # (Bc, num_vq)
            else:
                logits = self.embed.text_logits(rows_hidden)  # (Bt, V_text)
                batch = self.sampling.batch(row_slots, slot_t, step_t, 1, self.text_vocab)
                ids = sample(logits, batch, self.text_eos_id, self.sampling_kernel).view(len(rows), 1)  # (Bt, 1)
            self.sampling.remember(slot_t, step_t, ids)
            for row, row_ids in zip(rows, ids.tolist(), strict=True):
                out[row] = row_ids
        return out
