"""The synchronous engine: one ``step()`` schedules, runs the GPT, records the
results and decodes the audio that is due. No asyncio and no threads here.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import numpy as np

from turbotts.config import EngineConfig
from turbotts.cpu.precision import resolve_precision
from turbotts.engine.batch import RunnerOutput
from turbotts.engine.decode_path import kv_cache_dtype
from turbotts.engine.kv import KVLayout, plan_kv_layout
from turbotts.engine.model_runner import ModelRunner
from turbotts.engine.realtime import RealtimeConfig, RealtimePolicy
from turbotts.engine.request import FINISH_REASONS, EngineRequest, RequestOutput
from turbotts.engine.scheduler import Scheduler, SchedulerConfig, SequenceUpdate
from turbotts.engine.sequence import Sequence, SequenceKind
from turbotts.engine.streaming import AudioStream, DecodeWindow
from turbotts.engine.vocoder_runner import VocoderRunner
from turbotts.errors import InvalidInputError
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.reference import reference_codes
from turbotts.model.tokenizer import decorate_code_prompt, decorate_refine_prompt
from turbotts.params import SynthesisParams
from turbotts.text.frontend import TextFrontend
from turbotts.text.pronounce import PronunciationDict
from turbotts.text.sanitize import charset_from_vocab
from turbotts.text.segment import is_speakable


def resolve_decode_mode(mode: str, device_type: str) -> str:
    """``auto`` means CUDA graphs on a GPU and per-slot eager attention on CPU."""
    if mode == "auto":
        return "graphs" if device_type == "cuda" else "eager"
    return mode


@dataclass(frozen=True)
class StepStats:
    """What the last step did, for metrics and benchmarks."""

    num_prefill: int
    num_decode: int
    duration_s: float


def realtime_policy(config: EngineConfig, frames_per_s: float) -> RealtimePolicy:
    """The real-time policy of ``config``: it learns the capacity always, the scheduler enforces it unless off."""
    return RealtimePolicy(
        RealtimeConfig(
            frames_per_s=frames_per_s,
            margin=config.realtime_margin,
            max_batch_size=config.max_batch_size,
            max_queue_wait_s=config.max_queue_wait_s,
            capacity_override=config.realtime_capacity_override,
        )
    )


class EngineCore:
    """Owns the scheduler and the runners; callers add requests and call ``step()``."""

    def __init__(
        self, model: ChatTTSModel, config: EngineConfig, pronunciations: PronunciationDict | None = None
    ) -> None:
        self.model = model
        self.config = config
        gpt = model.modules.gpt
        decode_mode = resolve_decode_mode(config.decode_mode, model.device.type)
        kv_dtype = kv_cache_dtype(config.kv_dtype, gpt)
        bytes_per_token = gpt.kv_bytes_per_token(kv_dtype)
        # static/graph decoding pads batches into one scratch slot, paid from the same budget
        scratch_bytes = config.max_seq_len * bytes_per_token if decode_mode in ("static", "graphs") else 0
        self.kv_layout: KVLayout = plan_kv_layout(
            budget_bytes=config.kv_budget_bytes - scratch_bytes,
            max_seq_len=config.max_seq_len,
            bytes_per_token=bytes_per_token,
            max_slots=config.max_batch_size,
        )
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_batch_size=config.max_batch_size,
                max_waiting=config.max_waiting,
                num_slots=self.kv_layout.num_slots,
                max_seq_len=config.max_seq_len,
                max_prefill_tokens=config.max_prefill_tokens,
                audio_eos_id=model.config.gpt.audio_eos_id,
                text_eos_id=model.tokenizer.eos_id,
                is_realtime_admission=config.admission == "realtime",
            ),
            realtime_policy(config, model.sample_rate_hz / model.config.samples_per_code_frame),
        )
        self.runner = ModelRunner(
            model,
            self.kv_layout,
            decode_mode=decode_mode,
            max_batch_size=config.max_batch_size,
            kv_dtype=kv_dtype,
        )
        vocoder_dtype = config.vocoder_dtype
        if vocoder_dtype == "auto":  # bf16 only where it is native and measured faster here
            vocoder_dtype = resolve_precision("fp32", "none", "auto", model.device.type).vocoder_dtype
        self.vocoder_dtype = vocoder_dtype
        self.vocoder = VocoderRunner(model, vocoder_dtype)
        self.frontend = TextFrontend(charset_from_vocab(model.tokenizer.vocab_tokens()), pronunciations)
        self._requests: dict[str, EngineRequest] = {}
        self._by_seq: dict[int, EngineRequest] = {}
        self._next_seq_id = 0
        self.last_step: StepStats | None = None

    # -- requests -----------------------------------------------------------------

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    def has_work(self) -> bool:
        """Requests in flight, or aborted sequences whose slots the next step frees."""
        return bool(self._requests) or self.scheduler.has_work()

    def count_text_tokens(self, text: str) -> int:
        """Text tokens of ``text`` as a request would see it (front end, then tokenizer): pure, any thread."""
        return len(self.model.tokenizer.encode(self.frontend.prepare(text)))

    def spoken_text(self, text: str, *, normalize_text: bool = True) -> str:
        """``text`` after the front end, exactly as :meth:`add_request` prepares it: pure, any thread."""
        return self.frontend.prepare(text, normalize_text=normalize_text)

    def add_request(
        self,
        request_id: str,
        text: str,
        params: SynthesisParams,
        *,
        stream: bool = False,
        keep_hidden: bool = False,
        is_realtime: bool | None = None,
    ) -> EngineRequest:
        """Queue a synthesis.

        ``stream`` emits audio in chunks as frames are made; ``is_realtime`` (default: the
        same as ``stream``) puts it under real-time admission: a listener plays it as it comes.

        Raises:
            InvalidInputError: empty text after the front end, a bad voice string, a
                duplicate request id, or a prompt that does not fit one sequence.
            QueueFullError: the waiting queue is full.
            StreamCapacityError: a real-time stream would wait longer than ``max_queue_wait_s``.
        """
        if request_id in self._requests:
            raise InvalidInputError(f"request id {request_id!r} is already running")
        prepared = self.frontend.prepare(text, normalize_text=params.normalize_text)
        if not is_speakable(prepared):
            raise InvalidInputError("the text is empty after cleaning; give at least one speakable word")
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        voice = params.voice
        if voice is None and params.voice_seed is not None:
            voice = self.runner.random_voice(params.voice_seed)
        if voice is not None:
            self.runner.voice_vector(voice)  # validates now: a bad string is the caller's error
        prompt_codes = self._reference_codes(params)
        request = EngineRequest(
            request_id=request_id,
            text=prepared,
            params=params,
            seed=seed,
            voice=voice,
            prompt_codes=prompt_codes,
            audio=AudioStream(request_id, self.config.streaming, use_decoder=params.use_decoder, is_streaming=stream),
            sequence=self._first_sequence(prepared, params, seed, voice, prompt_codes),
            keep_hidden=keep_hidden,
            is_realtime=stream if is_realtime is None else is_realtime,
        )
        request.sequence.is_realtime = request.is_realtime
        self.scheduler.add(request.sequence)
        self._requests[request_id] = request
        self._by_seq[request.sequence.seq_id] = request
        return request

    def abort(self, request_id: str) -> bool:
        """Cancel a request; its KV slot is freed at the next step. False if unknown."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return False
        self.scheduler.abort(request.sequence)
        return True

    def _reference_codes(self, params: SynthesisParams) -> list[list[int]]:
        """The (P, num_vq) codes of the request's reference clip, checked now (a bad string is a 400)."""
        if params.reference is None:
            return []
        gpt = self.model.config.gpt
        return reference_codes(params.reference.spk_smp, gpt.num_vq, gpt.audio_eos_id)

    def _new_sequence(
        self, kind: SequenceKind, prompt: str, params: SynthesisParams, seed: int, voice: str | None = None,
        prompt_codes: list[list[int]] | None = None,
    ) -> Sequence:  # fmt: skip
        self._next_seq_id += 1
        sampling = params.refine if kind is SequenceKind.TEXT else params.code
        return Sequence(
            self._next_seq_id,
            kind,
            self.model.tokenizer.encode(prompt),
            sampling,
            seed,
            voice if kind is SequenceKind.CODE else None,
            prompt_codes=prompt_codes or [],
        )

    def _first_sequence(
        self, text: str, params: SynthesisParams, seed: int, voice: str | None, prompt_codes: list[list[int]]
    ) -> Sequence:
        if params.refine_text:
            refine_prompt = decorate_refine_prompt(text, params.refine_prompt)
            return self._new_sequence(SequenceKind.TEXT, refine_prompt, params, seed)
        return self._code_sequence(text, params, seed, voice, prompt_codes)

    def _code_sequence(
        self, text: str, params: SynthesisParams, seed: int, voice: str | None, prompt_codes: list[list[int]]
    ) -> Sequence:
        """The official code prompt: speaker slot, the reference's transcript, speed, text; then its codes."""
        txt_smp = params.reference.transcript if params.reference is not None else None
        prompt = decorate_code_prompt(text, params.prompt, txt_smp, has_speaker=voice is not None)
        return self._new_sequence(SequenceKind.CODE, prompt, params, seed, voice, prompt_codes)

    # -- the step -----------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule, execute, update, stream. Returns what finished or has new audio."""
        start = time.perf_counter()
        work = self.scheduler.schedule()
        if work.is_empty:
            self.last_step = StepStats(0, 0, 0.0)
            return []
        result = self.runner.execute(work)
        updates = self.scheduler.update(result)
        self._record(updates, result)
        outputs = self._stream()
        self.last_step = StepStats(len(work.prefill), len(work.decode), time.perf_counter() - start)
        self.scheduler.observe_step(self.last_step.num_prefill, self.last_step.num_decode, self.last_step.duration_s)
        return outputs

    def _record(self, updates: list[SequenceUpdate], result: RunnerOutput) -> None:
        for update in updates:
            request = self._by_seq.get(update.seq.seq_id)
            if request is None or request.request_id not in self._requests:
                continue  # aborted while its step ran
            if update.seq.kind is SequenceKind.CODE and update.new_ids is not None:
                request.audio.append(update.new_ids, result.hidden[update.row])
            if not update.is_finished:
                continue
            del self._by_seq[update.seq.seq_id]
            if update.seq.kind is SequenceKind.CODE:
                request.audio.complete()
            else:
                self._hand_refined_text_to_code_generation(request, update.seq)

    def _hand_refined_text_to_code_generation(self, request: EngineRequest, seq: Sequence) -> None:
        """The refine pass finished: its text becomes the prompt of the request's code sequence (first in line)."""
        refined = self.refined_text([ids[0] for ids in seq.output_ids])
        request.refined_text = refined
        request.sequence = self._code_sequence(
            refined, request.params, request.seed, request.voice, request.prompt_codes
        )
        request.sequence.is_realtime = request.is_realtime
        self._by_seq[request.sequence.seq_id] = request
        self.scheduler.add_priority(request.sequence)

    def refined_text(self, ids: list[int]) -> str:
        """Text of a refine pass: ids from ``[break_0]`` on are dropped, as the official does."""
        break_0 = self.model.tokenizer.break_0_id
        return self.model.tokenizer.decode([i for i in ids if i < break_0])

    def _stream(self) -> list[RequestOutput]:
        windows: list[DecodeWindow] = []
        for request in self._requests.values():
            window = request.audio.next_window()
            if window is not None:
                windows.append(window)
        audio = dict(zip([w.request_id for w in windows], self.vocoder.decode(windows), strict=True))
        for window in windows:
            self._requests[window.request_id].audio.mark_emitted(window)
        outputs = []
        now = time.perf_counter()
        for request_id in list(self._requests):
            request = self._requests[request_id]
            chunk = audio.get(request_id)
            is_finished = request.audio.is_complete
            if chunk is None and not is_finished:
                continue
            if chunk is not None and request.first_audio_s is None:
                request.first_audio_s = now
            outputs.append(self._output(request, chunk if chunk is not None else np.zeros(0, np.float32)))
            if is_finished:
                del self._requests[request_id]
        return outputs

    def _output(self, request: EngineRequest, chunk: np.ndarray) -> RequestOutput:
        is_finished = request.audio.is_complete
        ttfa = None if request.first_audio_s is None else request.first_audio_s - request.arrival_s
        status = request.sequence.status
        return RequestOutput(
            request_id=request.request_id,
            audio=chunk,
            is_finished=is_finished,
            finish_reason=FINISH_REASONS.get(status) if is_finished else None,
            codes=request.audio.codes if is_finished else None,
            hidden=request.audio.hidden_states() if is_finished and request.keep_hidden else None,
            ttfa_s=ttfa,
            num_frames=request.audio.num_frames,
            refined_text=request.refined_text,
        )
