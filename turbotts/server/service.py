"""What the HTTP and WebSocket routes do, without FastAPI: validate, plan, synthesize, encode.

A request is checked completely before any audio is made (model name, length,
text that is empty once cleaned, voice, parameters), so every user error
becomes a status code rather than a broken stream. Audio then flows
engine -> :class:`SegmentPipeline` (order, crossfade, time-stretch) ->
:class:`StreamEncoder` -> the response, one chunk at a time.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from turbotts.cache.tiered import CacheLevel
from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import InvalidInputError
from turbotts.guard.redact import sensitive_text, text_fields
from turbotts.guard.watermark import Payload, WatermarkStream
from turbotts.model.speaker import decode_voice
from turbotts.params import SamplingParams, SynthesisParams, default_refine_params
from turbotts.server.audio_effects import speed_plan
from turbotts.server.audio_encoding import StreamEncoder
from turbotts.server.exceptions import InputTooLongError, OverloadedError, UnknownModelError
from turbotts.server.guards import Guards
from turbotts.server.metrics import Metrics
from turbotts.server.pipeline import EngineSource, SegmentPipeline, SegmentSource, SynthesisTally, sentences_of
from turbotts.server.schemas import VOICE_NAME_PATTERN, SpeechRequest, SynthesisOptions, VoiceCreate, VoiceRef
from turbotts.server.settings import ServerSettings
from turbotts.server.voices import Voice, VoiceStore
from turbotts.text.sanitize import sanitize
from turbotts.text.segment import is_speakable, split_text

KNOWN_MODELS = frozenset({"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "chattts", "turbotts"})
_REFINE_PROMPT_RE = re.compile(r"^(?:\[(?:oral|laugh|break)_\d\])+$")
_VOICE_NAME_RE = re.compile(VOICE_NAME_PATTERN)
T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpeechPlan:
    """One request's resolved settings: the same params (voice, seed) for every segment."""

    params: SynthesisParams
    response_format: str
    stretch_rate: float
    warnings: tuple[str, ...] = ()
    is_deterministic: bool = False  # the client gave a seed: the audio may be cached


class AudioSource(Protocol):
    """Where a job's audio comes from: the segment pipeline, or the fallback clip."""

    tally: SynthesisTally
    sample_rate_hz: int

    def audio(self, segments: AsyncIterable[str]) -> AsyncIterator[np.ndarray]: ...


class ClipSource:
    """The configured fallback clip, answered while the server is degraded."""

    def __init__(self, clip: np.ndarray, sample_rate_hz: int) -> None:
        self.clip = clip
        self.sample_rate_hz = sample_rate_hz
        self.tally = SynthesisTally()

    async def audio(self, segments: AsyncIterable[str]) -> AsyncIterator[np.ndarray]:
        self.tally.num_segments, self.tally.num_samples = 1, self.clip.size
        yield self.clip


@dataclass
class SpeechJob:
    """A planned synthesis and its running tally (usage and metrics).

    ``watermark`` marks the final waveform (after joining and time-stretch) chunk by
    chunk before it is encoded; ``on_first_audio`` gets the time to first audio.
    """

    plan: SpeechPlan
    pipeline: AudioSource
    segments: AsyncIterable[str]
    metrics: Metrics
    started_s: float = field(default_factory=time.perf_counter)
    watermark: WatermarkStream | None = None
    on_first_audio: Callable[[float], None] | None = None
    cache_level: CacheLevel | None = None  # None: not cacheable (no seed)
    is_degraded: bool = False

    def usage(self) -> dict[str, int]:
        tally = self.pipeline.tally
        return {
            "input_tokens": tally.num_input_tokens,
            "output_tokens": tally.num_frames,
            "total_tokens": tally.num_input_tokens + tally.num_frames,
        }

    async def encoded(self) -> AsyncIterator[bytes]:
        """Bytes of ``response_format``, sent as soon as the encoder has them."""
        encoder = StreamEncoder(self.plan.response_format, self.pipeline.sample_rate_hz)
        self.metrics.in_flight.inc()
        is_first = True
        try:
            async for pcm in self.pipeline.audio(self.segments):
                data = encoder.encode(pcm if self.watermark is None else self.watermark.push(pcm))
                if data:
                    if is_first:
                        is_first = False
                        self._observe_first_audio()
                    yield data
            tail = encoder.finish()
            if tail:
                if is_first:  # a buffered format (flac): its first byte is its last
                    self._observe_first_audio()
                yield tail
            self._observe_done()
        finally:
            encoder.close()
            self.metrics.in_flight.dec()

    async def sse(self) -> AsyncIterator[str]:
        """OpenAI's ``stream_format="sse"``: base64 audio deltas, then a done event with usage."""
        async for data in self.encoded():
            yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
        yield _sse({"type": "speech.audio.done", "usage": self.usage()})

    def _observe_first_audio(self) -> None:
        ttfa_s = time.perf_counter() - self.started_s
        self.metrics.ttfa_s.labels(self.plan.response_format).observe(ttfa_s)
        if self.on_first_audio is not None:
            self.on_first_audio(ttfa_s)

    def _observe_done(self) -> None:
        audio_s = self.pipeline.tally.num_samples / self.pipeline.sample_rate_hz
        self.metrics.audio_s.inc(audio_s)
        if audio_s > 0:
            self.metrics.rtf.observe((time.perf_counter() - self.started_s) / audio_s)


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


async def _iterate(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


class SpeechService:
    """Speech and voice operations over one engine and one voice store."""

    def __init__(
        self, engine: AsyncEngine, voices: VoiceStore, settings: ServerSettings, metrics: Metrics, guards: Guards
    ) -> None:
        self.engine = engine
        self.voices = voices
        self.settings = settings
        self.metrics = metrics
        self.guards = guards
        model = engine.core.model
        self.sample_rate_hz = model.sample_rate_hz
        self._hidden_size = model.config.gpt.hidden_size
        self._tokenizer = model.tokenizer
        self._frontend = engine.core.frontend

    # -- speech ---------------------------------------------------------------------

    async def speech(self, request: SpeechRequest, request_id: str) -> SpeechJob:
        """Check a ``/v1/audio/speech`` request, admit it and plan it; no synthesis runs yet.

        User errors come first (a 400 says more than a 503); then admission control, then
        the cache lookup of a deterministic request.

        Raises:
            UnknownModelError, InputTooLongError, InvalidInputError, VoiceNotFoundError,
            ContentFilteredError, OverloadedError.
        """
        with sensitive_text(request.input):  # scrubs the text from this task's log lines (a second layer)
            return await self._speech(request, request_id)

    async def _speech(self, request: SpeechRequest, request_id: str) -> SpeechJob:
        if request.model not in KNOWN_MODELS:
            raise UnknownModelError(
                f"model {request.model[:100]!r} is not served here; use one of {', '.join(sorted(KNOWN_MODELS))}"
            )
        text = self.clean_input(request.input)
        self.check_content(request.input)
        is_degraded = self.admit()
        plan = self.plan(request)
        described = text_fields(request.input)
        logger.info(
            "speech text_sha256=%s text_len=%d format=%s seeded=%s",
            described["text_sha256"], described["text_len"], plan.response_format, plan.is_deterministic,
        )  # fmt: skip
        if is_degraded and self.guards.fallback_clip is not None:
            clip = ClipSource(self.guards.fallback_clip, self.sample_rate_hz)
            return SpeechJob(plan, clip, _iterate([]), self.metrics, is_degraded=True)
        segments = split_text(text, self.settings.max_segment_chars)
        job = self._job(plan, _iterate(segments), request_id, watermark_key=request.input)
        await self.look_up_cache(job, segments)
        return job

    def text_stream(self, options: SynthesisOptions, pieces: AsyncIterable[str], request_id: str) -> SpeechJob:
        """Plan a synthesis of incrementally arriving text, cut at sentence ends (each checked by the blocklist)."""
        self.admit()  # a degraded server still takes streams: the fallback clip cannot answer arbitrary text
        segments = self._checked(sentences_of(pieces, self.settings.max_segment_chars))
        return self._job(self.plan(options), segments, request_id, watermark_key=request_id)

    def admit(self) -> bool:
        """Whether to answer degraded (the fallback clip).

        Raises:
            OverloadedError: admission control refuses new work now.
        """
        decision = self.guards.admission.check()
        if not decision.is_admitted:
            reason = decision.reason or "queue"
            self.metrics.admission_rejections.labels(reason).inc()
            raise OverloadedError(
                f"the server is overloaded ({reason.replace('_', ' ')}); retry in {decision.retry_after_s:.0f} s "
                "or on another replica",
                reason,
                decision.retry_after_s,
            )
        if decision.is_degraded:
            self.metrics.degraded.labels("fallback").inc()
        return decision.is_degraded

    def check_content(self, text: str) -> None:
        """Raises: ContentFilteredError (400 ``content_filtered``) when the blocklist matches."""
        content_filter = self.guards.content_filter
        if content_filter is not None and content_filter.check(text) is not None:
            self.metrics.content_filtered.inc()
            content_filter.ensure_allowed(text)

    async def _checked(self, segments: AsyncIterable[str]) -> AsyncIterator[str]:
        async for segment in segments:
            self.check_content(segment)
            yield segment

    def _job(
        self,
        plan: SpeechPlan,
        segments: AsyncIterable[str],
        request_id: str,
        *,
        watermark_key: str,
    ) -> SpeechJob:
        source: SegmentSource = EngineSource(self.engine, plan.params, on_request=self.metrics.engine_requests.inc)
        if plan.is_deterministic:
            source = self.guards.audio_cache.source(source, plan.params, frozenset())
        pipeline = SegmentPipeline(
            self.engine,
            plan.params,
            request_id=request_id,
            max_in_flight=self.settings.max_segments_in_flight,
            stretch_rate=plan.stretch_rate,
            sample_rate_hz=self.sample_rate_hz,
            count_tokens=self._count_tokens,
            source=source,
        )
        guards = self.guards
        watermark = None
        if guards.watermark_key is not None:
            payload = Payload.for_request(guards.watermark_key_id, watermark_key)
            watermark = WatermarkStream(guards.watermark_key, payload)
        return SpeechJob(
            plan, pipeline, segments, self.metrics, watermark=watermark, on_first_audio=guards.admission.observe_ttfa
        )

    async def look_up_cache(self, job: SpeechJob, segments: list[str]) -> None:
        """Set ``job.cache_level`` (the ``X-Cache`` header) for a deterministic job; each segment is counted once."""
        if not job.plan.is_deterministic or not isinstance(job.pipeline, SegmentPipeline):
            return
        audio_cache = self.guards.audio_cache
        keys = [audio_cache.key(segment, job.plan.params) for segment in segments]
        job.cache_level = await audio_cache.look_up(keys)
        inner = EngineSource(self.engine, job.plan.params, on_request=self.metrics.engine_requests.inc)
        job.pipeline.source = audio_cache.source(inner, job.plan.params, frozenset(keys))

    def _count_tokens(self, text: str) -> int:
        """Text tokens of one segment as the engine will see it (usage.input_tokens)."""
        return len(self._tokenizer.encode(self._frontend.prepare(text)))

    def clean_input(self, text: str) -> str:
        """Sanitized text. Raises InputTooLongError (413) or InvalidInputError (nothing to say)."""
        if len(text) > self.settings.max_input_chars:
            raise InputTooLongError(
                f"input is {len(text)} characters; this server takes at most {self.settings.max_input_chars}. "
                "Split the text into several requests, or use the WebSocket endpoint for long text"
            )
        cleaned = sanitize(text)
        if not is_speakable(cleaned):
            raise InvalidInputError("input has nothing to say once markup, emoji and symbols are removed")
        return cleaned

    def plan(self, options: SynthesisOptions) -> SpeechPlan:
        """Resolve voice, seed, speed and sampling into one :class:`SynthesisParams`."""
        warnings: list[str] = []
        voice, voice_seed = self.resolve_voice(options.voice)
        token, rate = speed_plan(options.speed)
        refine_prompt = ""
        if options.instructions:
            compact = re.sub(r"\s+", "", options.instructions)
            if _REFINE_PROMPT_RE.match(compact):
                refine_prompt = compact
            else:
                warnings.append("instructions ignored (ChatTTS takes only refine tokens like [oral_2][break_6])")
        cap = self.settings.max_new_tokens
        code = SamplingParams(max_new_tokens=min(options.max_new_tokens or cap, cap))
        overrides = {
            name: getattr(options, name)
            for name in ("temperature", "top_p", "top_k", "repetition_penalty")
            if getattr(options, name) is not None
        }
        code = replace(code, **overrides)
        refine = default_refine_params()
        refine = replace(refine, max_new_tokens=min(refine.max_new_tokens, cap))
        refine_text = self.settings.default_refine_text if options.refine_text is None else options.refine_text
        params = SynthesisParams(
            code=code,
            refine=refine,
            voice=voice,
            voice_seed=voice_seed,
            seed=options.seed if options.seed is not None else secrets.randbits(63),
            prompt=f"[speed_{token}]" if token is not None else "[speed_5]",
            refine_prompt=refine_prompt,
            refine_text=refine_text,
        )
        return SpeechPlan(params, options.response_format, rate, tuple(warnings), options.seed is not None)

    def resolve_voice(self, voice: str | VoiceRef) -> tuple[str | None, int | None]:
        """``(voice string, voice seed)``: a name is looked up, anything else must be a voice string.

        Raises:
            VoiceNotFoundError: an unknown name.
            VoiceError: not a name and not a valid voice string for this checkpoint.
        """
        name = voice.id if isinstance(voice, VoiceRef) else voice
        if _VOICE_NAME_RE.match(name):
            found = self.voices.get(name)
            return found.voice, found.seed
        decode_voice(name, self._hidden_size)
        return name, None

    # -- voices ---------------------------------------------------------------------

    def list_voices(self) -> list[Voice]:
        return self.voices.list()

    def create_voice(self, body: VoiceCreate) -> Voice:
        """Raises: VoiceExistsError, VoiceError (a voice string this checkpoint cannot use)."""
        if body.voice is not None:
            decode_voice(body.voice, self._hidden_size)
        return self.voices.add(body.name, seed=body.seed, voice=body.voice)

    def delete_voice(self, name: str) -> None:
        self.voices.delete(name)


async def prime(stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """Run ``stream`` up to its first item, so that its errors raise before a response starts.

    Returns an iterator over the same items (the first included).
    """
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        return _chain(None, stream)
    return _chain((first,), stream)


async def _chain(head: tuple[T] | None, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        if head is None:
            return
        yield head[0]
        async for item in rest:
            yield item
    finally:
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()
