"""What the HTTP and WebSocket routes do, without FastAPI: the speech request path, top to bottom.

``speech`` reads in the order a request lives: check (model, length, text that is
empty once cleaned or SSML outside the subset, blocklist; the segments come from the one
segmenter, :func:`~turbotts.text.segmenter.split_input`) -> admit -> resolve the options
(voice, seed, speed, sampling) -> look up the cache -> build the segment source once -> a complete
:class:`SpeechJob`. Every user error raises before any audio is made, so it
becomes a status code rather than a broken stream. The route then streams the
job: engine -> :class:`SegmentPipeline` (order, crossfade, time-stretch) ->
watermark -> encoder, one chunk at a time.

Request ids: the route's id (``X-Request-ID`` or a new one) names the request in
logs; segment ``n`` of it is the engine request ``<id>.<n>``.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from turbotts.cache.tiered import CacheLevel
from turbotts.engine.async_engine import AsyncEngine
from turbotts.errors import InputTooLongError, OverloadedError, UnknownModelError
from turbotts.guard.watermark import Payload, WatermarkStream
from turbotts.params import SynthesisParams, user_sampling
from turbotts.redaction import sensitive_text, text_fields
from turbotts.server.audio.effects import MAX_SPEED, MIN_SPEED, split_speed
from turbotts.server.audio.encoding import BUFFERED_FORMATS
from turbotts.server.ops.guard_wiring import Guards
from turbotts.server.ops.metrics import Metrics
from turbotts.server.schemas import SpeechRequest, SynthesisOptions
from turbotts.server.settings import ServerSettings
from turbotts.server.speech.assembler import check_rate
from turbotts.server.speech.job import ClipSource, ResolvedOptions, SpeechJob
from turbotts.server.speech.pipeline import EngineSource, SegmentPipeline, SegmentSource, sentences_of
from turbotts.server.speech.stream_runs import InputFormat, PlainRuns
from turbotts.server.speech.voices_ssml import StreamVoices, sources_by_voice, voice_label, voice_params
from turbotts.server.voices.service import VoiceService
from turbotts.text.instructions import interpret
from turbotts.text.segmenter import split_input
from turbotts.text.ssml import is_ssml
from turbotts.text.utterances import SpeechItem, Utterance

KNOWN_MODELS = frozenset({"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "chattts", "turbotts"})
logger = logging.getLogger(__name__)
T = TypeVar("T")


class SpeechService:
    """Speech over one engine; voices through :class:`VoiceService`."""

    def __init__(
        self,
        engine: AsyncEngine,
        voices: VoiceService,
        settings: ServerSettings,
        metrics: Metrics,
        guards: Guards,
        fallback: ClipSource | None = None,
    ) -> None:
        self.engine = engine
        self.fallback = fallback  # answered while admission control says "degraded" (degrade_mode=fallback)
        self.voices = voices
        self.settings = settings
        self.metrics = metrics
        self.guards = guards
        self.sample_rate_hz = engine.sample_rate_hz

    async def speech(self, request: SpeechRequest, request_id: str) -> SpeechJob:
        """Check, admit and resolve a ``/v1/audio/speech`` request; the job is complete, no synthesis runs yet.

        User errors come first (a 400 says more than a 503); then admission control, then
        the cache lookup of a deterministic request.

        Raises:
            UnknownModelError, InputTooLongError, InvalidInputError, VoiceNotFoundError,
            ContentFilteredError, OverloadedError.
        """
        with sensitive_text(request.input):  # scrubs the text from this task's log lines (a second layer)
            return await self._speech(request, request_id)

    async def _speech(self, request: SpeechRequest, request_id: str) -> SpeechJob:
        _check_model(request.model)
        items = self.segments_of(request)
        self.check_content(request.input)
        is_degraded = self.admit()
        resolved = self.resolve_options(request)
        named = voice_params(self.voices.resolve, resolved.params, items)  # SSML <voice>: a 4xx before any audio
        for item in items:
            if isinstance(item, Utterance):
                check_rate(resolved.stretch_rate, item.rate)  # speed times prosody rate: refused before any audio
        described = text_fields(request.input)
        logger.info(
            "speech text_sha256=%s text_len=%d format=%s seeded=%s",
            described["text_sha256"], described["text_len"], resolved.response_format, resolved.is_deterministic,
        )  # fmt: skip
        if is_degraded and self.fallback is not None:
            clip = ClipSource(self.fallback.clip, self.sample_rate_hz)  # a fresh tally per request
            return SpeechJob(resolved, clip, _iterate([]), self.metrics, is_degraded=True)
        cache_level, source, voices = await sources_by_voice(self._source, resolved, items, named)
        return self._job(
            resolved, source, _iterate(items), request_id, watermark_key=request.input, cache_level=cache_level,
            voices=voices, default_voice=voice_label(request.voice) if named else None,
        )  # fmt: skip

    def text_stream(
        self, options: SynthesisOptions, pieces: AsyncIterable[str], request_id: str,
        input_format: InputFormat | None = None,
    ) -> SpeechJob:  # fmt: skip
        """A synthesis of incrementally arriving text, cut at sentence ends (each checked by the blocklist).

        A piece that is SSML (``input_format="ssml"``, or unset and the piece looks like SSML, as
        HTTP decides) is one whole document: it goes through :meth:`items_of`, as an HTTP input does.
        """
        self.admit()  # a degraded server still takes streams: the fallback clip cannot answer arbitrary text
        resolved = self.resolve_options(options)
        segments = self._stream_items(pieces, input_format, resolved.stretch_rate)
        in_voice = StreamVoices(self.voices.resolve, resolved.params,
                                lambda params: self._stream_source(replace(resolved, params=params)))  # fmt: skip
        return self._job(resolved, self._stream_source(resolved), segments, request_id, watermark_key=request_id,
                         voices=in_voice)  # fmt: skip

    def _stream_source(self, resolved: ResolvedOptions) -> SegmentSource:
        """The engine; behind the cache when seeded (segments are not known yet: nothing to look up, but fill it)."""
        source: SegmentSource = self._engine_source(resolved)
        if resolved.is_deterministic:
            source = self.guards.audio_cache.source(source, resolved.params, frozenset())
        return source

    # -- checks -------------------------------------------------------------------------

    def segments_of(self, request: SpeechRequest) -> list[SpeechItem]:
        """The utterances and pauses of the input (plain text or SSML), cut by the one segmenter.

        Raises:
            InputTooLongError, InvalidInputError (nothing to say), SSMLError (400 naming element and position),
            ContentFilteredError (what SSML's ``<sub>`` and ``<say-as>`` produced).
        """
        return self.items_of(request.input, request.input_format)

    def items_of(self, text: str, input_format: InputFormat | None) -> list[SpeechItem]:
        """:meth:`segments_of` for one text (an HTTP input, or an SSML message on the WebSocket)."""
        self.check_length(text)
        is_markup = input_format == "ssml" or (input_format is None and is_ssml(text))
        items = split_input(text, is_ssml=is_markup, max_segment_chars=self.settings.max_segment_chars)
        if is_markup:
            for item in items:  # what <sub> and <say-as> produced, too
                if isinstance(item, Utterance):
                    self.check_content(item.text)
        return items

    def check_length(self, text: str) -> None:
        """Raises InputTooLongError (413) for input longer than ``max_input_chars``."""
        if len(text) > self.settings.max_input_chars:
            raise InputTooLongError(
                f"input is {len(text)} characters; this server takes at most {self.settings.max_input_chars}. "
                "Split the text into several requests, or use the WebSocket endpoint for long text"
            )

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

    async def _stream_items(
        self, pieces: AsyncIterable[str], input_format: InputFormat | None, stretch_rate: float
    ) -> AsyncIterator[str | SpeechItem]:
        """Plain runs of pieces cut into sentences; each SSML piece (a whole document) as its items."""
        runs = PlainRuns(pieces, lambda piece: input_format == "ssml" or (input_format is None and is_ssml(piece)))
        while not runs.is_exhausted:
            async for segment in self._checked(sentences_of(runs.plain(), self.settings.max_segment_chars)):
                yield segment
            if (document := runs.take_markup()) is not None:
                for item in self.items_of(document, "ssml"):
                    if isinstance(item, Utterance):
                        check_rate(stretch_rate, item.rate)
                    yield item

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

    # -- options, source, job ---------------------------------------------------------------

    def resolve_options(self, options: SynthesisOptions) -> ResolvedOptions:
        """Resolve voice, seed, speed and sampling into one :class:`SynthesisParams`."""
        warnings: list[str] = []
        resolved = self.voices.resolve(options.voice)
        refine_text = self.settings.default_refine_text if options.refine_text is None else options.refine_text
        instructed = interpret(options.instructions) if options.instructions else None
        if instructed is not None and instructed.refine_prompt:
            if options.refine_text is None:
                refine_text = True  # refine tokens act only in the refine stage: asking for them turns it on
            elif not refine_text:
                instructed = instructed.without_refine("refine_text is false")
        if instructed is not None and instructed.ignored:
            warnings.append(
                f"instructions ignored: {len(instructed.ignored)} not understood (listed in X-TurboTTS-Instructions); "
                "ChatTTS takes pace, laughter, pauses, casual style, or refine tokens like [oral_2][break_6]"
            )
        speed = options.speed * (instructed.speed_factor if instructed is not None else 1.0)
        token, rate = split_speed(min(max(speed, MIN_SPEED), MAX_SPEED))
        code, refine = user_sampling(
            max_new_tokens=options.max_new_tokens,
            max_new_tokens_cap=self.settings.max_new_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            top_k=options.top_k,
            repetition_penalty=options.repetition_penalty,
        )
        params = SynthesisParams(
            code=code,
            refine=refine,
            voice=resolved.voice,
            voice_seed=resolved.voice_seed,
            reference=resolved.reference,
            seed=options.seed if options.seed is not None else secrets.randbits(63),
            prompt=f"[speed_{token}]" if token is not None else "[speed_5]",
            refine_prompt=instructed.refine_prompt if instructed is not None else "",
            refine_text=refine_text,
        )
        fmt = options.response_format
        bit_rate_kbps = self.settings.bit_rate_kbps(fmt)
        return ResolvedOptions(
            params, fmt, rate, tuple(warnings), options.seed is not None, bit_rate_kbps, instructions=instructed,
            playback_buffer_s=options.playback_buffer_s,
        )  # fmt: skip

    def _engine_source(self, resolved: ResolvedOptions) -> EngineSource:
        """Streamed formats are real-time work (a listener plays them as they come); buffered ones are batch."""
        is_realtime = resolved.response_format not in BUFFERED_FORMATS
        return EngineSource(self.engine, resolved.params, on_request=self.metrics.engine_requests.inc,
                            is_realtime=is_realtime, playback_buffer_s=resolved.playback_buffer_s)  # fmt: skip

    async def _source(self, resolved: ResolvedOptions, segments: list[str]) -> tuple[CacheLevel | None, SegmentSource]:
        """The segment source, built once: the engine, behind the audio cache when the request has a seed.

        Returns the ``X-Cache`` level too (each segment looked up and counted once), None when not cacheable.
        """
        source: SegmentSource = self._engine_source(resolved)
        if not resolved.is_deterministic:
            return None, source
        audio_cache = self.guards.audio_cache
        keys = [audio_cache.key(segment, resolved.params) for segment in segments]
        level = await audio_cache.look_up(keys)
        return level, audio_cache.source(source, resolved.params, frozenset(keys))

    def _job(
        self, resolved: ResolvedOptions, source: SegmentSource, segments: AsyncIterable[str | SpeechItem],
        request_id: str, *, watermark_key: str, cache_level: CacheLevel | None = None,
        voices: Mapping[str, SegmentSource] | None = None, default_voice: str | None = None,
    ) -> SpeechJob:  # fmt: skip
        pipeline = SegmentPipeline(
            self.engine,
            resolved.params,
            request_id=request_id,
            max_segments_in_flight=self.settings.max_segments_in_flight,
            stretch_rate=resolved.stretch_rate,
            sample_rate_hz=self.sample_rate_hz,
            count_tokens=self.engine.count_text_tokens,
            source=source,
            observe_in_flight=self.metrics.observe_segments_in_flight,
            spoken_text=functools.partial(self.engine.spoken_text, normalize_text=resolved.params.normalize_text),
            voice_sources=voices,  # SSML <voice>: each voice's segments from its own source
            default_voice=default_voice,
        )
        guards = self.guards
        watermark = None
        if guards.watermark_key is not None:
            payload = Payload.for_request(guards.watermark_key_id, watermark_key)
            watermark = WatermarkStream(guards.watermark_key, payload)
        return SpeechJob(
            resolved, pipeline, segments, self.metrics, watermark=watermark,
            on_first_audio=guards.admission.observe_ttfa, cache_level=cache_level,
        )  # fmt: skip


def _check_model(model: str) -> None:
    if model not in KNOWN_MODELS:
        raise UnknownModelError(
            f"model {model[:100]!r} is not served here; use one of {', '.join(sorted(KNOWN_MODELS))}"
        )


async def _iterate(items: Iterable[T]) -> AsyncIterator[T]:
    """An async iterator over ``items`` (segments known up front), as the job reads every segment source."""
    for item in items:
        yield item
