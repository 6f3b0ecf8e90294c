"""SSML ``<voice name>``: each voice a document names, resolved as the request's ``voice`` is, with its own source.

A document may change voices (dialogue, a podcast script). Every name is resolved by
:meth:`~turbotts.server.voices.service.VoiceService.resolve` before the job is built, so an
unknown voice is the same 4xx as an unknown ``voice`` field, before any audio. Each voice's
segments then come from a segment source built with that voice's :class:`SynthesisParams`
(the request's params with its voice swapped in), so the audio cache keys hold the voice
that actually speaks each segment. No FastAPI here.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace

from turbotts.cache.tiered import CacheLevel
from turbotts.model.voice_mix import is_voice_mix
from turbotts.params import SynthesisParams
from turbotts.server.schemas import VOICE_NAME_PATTERN, VoiceRef
from turbotts.server.speech.job import ResolvedOptions
from turbotts.server.speech.pipeline import SegmentSource
from turbotts.server.voices.service import ResolvedVoice
from turbotts.text.utterances import SpeechItem, Utterance

_VOICE_NAME_RE = re.compile(VOICE_NAME_PATTERN)
MakeSource = Callable[[ResolvedOptions, list[str]], Awaitable[tuple[CacheLevel | None, SegmentSource]]]


def voice_params(
    resolve: Callable[[str], ResolvedVoice], params: SynthesisParams, items: Iterable[SpeechItem]
) -> dict[str, SynthesisParams]:
    """The params of each ``<voice name>`` in ``items``: the request's own, in that voice.

    Raises:
        VoiceNotFoundError, VoiceMixError, VoiceError: as for the request's ``voice`` field.
    """
    named: dict[str, SynthesisParams] = {}
    for item in items:
        if isinstance(item, Utterance) and item.voice is not None and item.voice not in named:
            named[item.voice] = _in_voice(resolve(item.voice), params)
    return named


def _in_voice(voice: ResolvedVoice, params: SynthesisParams) -> SynthesisParams:
    return replace(params, voice=voice.voice, voice_seed=voice.voice_seed, reference=voice.reference)


class StreamVoices(Mapping[str, SegmentSource]):
    """The sources of the voices a text stream's SSML names, each resolved when it first speaks.

    A stream's documents are not known when it starts, so an unknown voice fails where it is
    used (the pipeline raises it, an error on the stream), not before the first audio.
    """

    def __init__(
        self,
        resolve: Callable[[str], ResolvedVoice],
        params: SynthesisParams,
        make_source: Callable[[SynthesisParams], SegmentSource],
    ) -> None:
        self._resolve = resolve
        self._params = params
        self._make_source = make_source
        self._sources: dict[str, SegmentSource] = {}

    def __getitem__(self, name: str) -> SegmentSource:
        if name not in self._sources:
            self._sources[name] = self._make_source(_in_voice(self._resolve(name), self._params))
        return self._sources[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


def voice_label(voice: str | VoiceRef) -> str | None:
    """The request's own voice as captions name it: a name or a mix (a voice string is too long: unnamed)."""
    name = voice.id if isinstance(voice, VoiceRef) else voice
    return name if _VOICE_NAME_RE.match(name) or is_voice_mix(name) else None


def _texts(items: Iterable[SpeechItem], voice: str | None) -> list[str]:
    return [item.text for item in items if isinstance(item, Utterance) and item.voice == voice]


def _combined(first: CacheLevel | None, second: CacheLevel | None) -> CacheLevel | None:
    """The ``X-Cache`` level of two lookups: a miss anywhere is a miss, then Redis, then memory."""
    if first is None or second is None:
        return None
    levels = {first, second}
    return "miss" if "miss" in levels else "l2" if "l2" in levels else "l1"


async def sources_by_voice(
    make_source: MakeSource, resolved: ResolvedOptions, items: list[SpeechItem], named: dict[str, SynthesisParams]
) -> tuple[CacheLevel | None, SegmentSource, dict[str, SegmentSource]]:
    """The request's source, one per named voice (``named``: :func:`voice_params`), and their cache level."""
    level, source = await make_source(resolved, _texts(items, None))
    sources: dict[str, SegmentSource] = {}
    for name, params in named.items():
        voice_level, sources[name] = await make_source(replace(resolved, params=params), _texts(items, name))
        level = _combined(level, voice_level)
    return level, source, sources
