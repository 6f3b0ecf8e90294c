"""The synchronous engine: one ``step()`` schedules, runs the GPT, records the
results and decodes the audio that is due. No asyncio and no threads here.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from turbotts.config import EngineConfig
from turbotts.cpu.precision import resolve_precision
from turbotts.engine.batch import RunnerOutput
from turbotts.engine.deadline import PlaybackClock, is_chunk_late
from turbotts.engine.decode_path import kv_cache_dtype, resolve_decode_mode
from turbotts.engine.kv import KVLayout, plan_kv_layout
from turbotts.engine.model_runner import ModelRunner
from turbotts.engine.realtime import realtime_policy
from turbotts.engine.request import FINISH_REASONS, EngineRequest, RequestOutput
from turbotts.engine.scheduler import Scheduler, SchedulerConfig, SequenceUpdate
from turbotts.engine.sequence import Sequence, SequenceKind
from turbotts.engine.sequence_builder import SequenceBuilder
from turbotts.engine.streaming import SAMPLES_PER_FRAME, AudioStream, DecodeWindow
from turbotts.engine.vocoder_runner import VocoderRunner
from turbotts.errors import InvalidInputError
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.reference import reference_codes
from turbotts.params import SynthesisParams
from turbotts.text.frontend import TextFrontend
from turbotts.text.pronounce import PronunciationDict
from turbotts.text.sanitize import charset_from_vocab
from turbotts.text.segment import is_speakable


@dataclass(frozen=True)
class StepStats:
    """What the last step did, for metrics and benchmarks."""

    num_prefill: int
    num_decode: int
    duration_s: float


class EngineCore:
    """Owns the scheduler and the runners; callers add requests and call ``step()``.

    ``clock`` times everything the policies see (arrivals, first audio, step and vocoder
    seconds); tests pass a virtual one to replay a machine of a given speed.
    """

    def __init__(
        self,
        model: ChatTTSModel,
        config: EngineConfig,
        pronunciations: PronunciationDict | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model = model
        self._clock = clock
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
                scheduling=config.scheduling,
            ),
            realtime_policy(config, model.sample_rate_hz / model.config.samples_per_code_frame),
            clock=clock,
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
        self._sequences = SequenceBuilder(model.tokenizer)
        self.last_step: StepStats | None = None
        streaming = config.streaming
        self._first_chunk_frames = streaming.first_chunk_frames + streaming.first_chunk_lookahead_frames
        # a playing listener about to run dry gets what is made now (deadline only: fifo keeps the planned chunks)
        self._sends_late_chunks = config.scheduling == "deadline"

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
        playback_buffer_s: float | None = None,
    ) -> EngineRequest:
        """Queue a synthesis.

        ``stream`` emits audio in chunks as frames are made; ``is_realtime`` (default: the
        same as ``stream``) puts it under real-time admission: a listener plays it as it comes,
        after buffering ``playback_buffer_s`` (default: the engine's setting), which sets its deadlines.

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
            sequence=self._sequences.first(prepared, params, seed, voice, prompt_codes),
            keep_hidden=keep_hidden,
            is_realtime=stream if is_realtime is None else is_realtime,
            arrival_s=self._clock(),
        )
        request.sequence.is_realtime = request.is_realtime
        if request.is_realtime and stream:
            buffer_s = self.config.playback_buffer_s if playback_buffer_s is None else playback_buffer_s
            first_chunk = self._first_chunk_frames
            request.sequence.playback = PlaybackClock(buffer_s, request.arrival_s, num_frames_to_next_chunk=first_chunk)
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

    # -- the step -----------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule, execute, update, stream. Returns what finished or has new audio."""
        start = self._clock()
        work = self.scheduler.schedule()
        if work.is_empty:
            self.last_step = StepStats(0, 0, 0.0)
            return []
        result = self.runner.execute(work)
        updates = self.scheduler.update(result)
        self._record(updates, result)
        outputs, vocoder_s = self._stream()
        self.last_step = StepStats(len(work.prefill), len(work.decode), self._clock() - start)
        self.scheduler.observe_step(len(work.prefill), len(work.decode), self.last_step.duration_s - vocoder_s)
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
        request.sequence = self._sequences.code(
            refined, request.params, request.seed, request.voice, request.prompt_codes
        )
        request.sequence.is_realtime = request.is_realtime
        request.sequence.playback = seq.playback
        self._by_seq[request.sequence.seq_id] = request
        self.scheduler.add_priority(request.sequence)

    def refined_text(self, ids: list[int]) -> str:
        """Text of a refine pass: ids from ``[break_0]`` on are dropped, as the official does."""
        break_0 = self.model.tokenizer.break_0_id
        return self.model.tokenizer.decode([i for i in ids if i < break_0])

    def _stream(self) -> tuple[list[RequestOutput], float]:
        """Decode the chunks that are due; returns the outputs and the vocoder's seconds."""
        windows: list[DecodeWindow] = []
        for request in self._requests.values():
            window = request.audio.next_window(is_late=self._is_chunk_late(request))
            if window is not None:
                windows.append(window)
        vocoder_start = self._clock()
        audio = dict(zip([w.request_id for w in windows], self.vocoder.decode(windows), strict=True))
        vocoder_s = self._clock() - vocoder_start if windows else 0.0
        num_samples = sum(w.keep_to - w.keep_from for w in windows)
        self.scheduler.observe_vocoder(num_samples // SAMPLES_PER_FRAME, vocoder_s)
        for window in windows:
            self._requests[window.request_id].audio.mark_emitted(window)
        outputs = []
        now = self._clock()
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
        for request in self._requests.values():
            self._update_playback(request)
        return outputs, vocoder_s

    def _is_chunk_late(self, request: EngineRequest) -> bool:
        """Its listener's player is about to run dry (see :func:`is_chunk_late`)."""
        clock = request.sequence.playback
        if clock is None or not self._sends_late_chunks:
            return False
        return is_chunk_late(clock, self._clock(), self.config.streaming.late_chunk_margin_s)

    def _update_playback(self, request: EngineRequest) -> None:
        """What the scheduler's deadline policy reads of this stream's listener."""
        clock = request.sequence.playback
        if clock is None:
            return
        emitted_s = request.audio.num_emitted_samples / self.model.sample_rate_hz
        audio = request.audio
        # a playing listener's chunk leaves early when it must (_is_chunk_late): it waits on fewer frames
        may_leave_late = clock.playing_since_s is not None and self._sends_late_chunks
        frames = audio.num_frames_to_late_chunk if may_leave_late else audio.num_frames_to_next_chunk
        clock.observe(self._clock(), request.first_audio_s, emitted_s, frames)

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
