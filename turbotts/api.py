"""The blocking Python API: load a model once, synthesize batches of texts.

Example::

    from turbotts import TTS, SynthesisParams
    tts = TTS.load(ModelSource(checkpoint="path/to/ChatTTS"))
    wavs = tts.synthesize(["你好", "hello"], SynthesisParams(seed=7))  # float32 at 24 kHz

Everything runs through the same continuous-batching engine the server uses,
stepped on the calling thread.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch

from turbotts.audio import ReferenceLimits, load_reference_clip, resample
from turbotts.config import EngineConfig
from turbotts.engine.core import EngineCore
from turbotts.engine.request import RequestOutput
from turbotts.model.chattts import ChatTTSModel
from turbotts.model.reference import encode_reference
from turbotts.model.speaker import decode_voice, encode_voice
from turbotts.model.voice_mix import is_voice_mix, mix_voices, parse_voice_mix
from turbotts.params import SynthesisParams, VoiceReference
from turbotts.sources import ModelSource, load_model_gated
from turbotts.text.segment import DEFAULT_MAX_SEGMENT_CHARS
from turbotts.text.segmenter import split_input
from turbotts.text.utterances import Utterance

#: The DVAE encoder needs more than one STFT hop (official case j7 fails below this).
MIN_REFERENCE_SAMPLES = 513


@dataclass(frozen=True)
class CodeResult:
    """Codes (T, num_vq) int64 and, when kept, hidden states (T, H) float32 of one text."""

    codes: np.ndarray
    hidden: np.ndarray | None
    finish_reason: str | None
    refined_text: str | None


class TTS:
    """A loaded model and its engine."""

    def __init__(self, model: ChatTTSModel, engine_config: EngineConfig | None = None) -> None:
        self.model = model
        self.engine = EngineCore(model, engine_config or EngineConfig())
        self._ids = itertools.count()

    @classmethod
    def load(
        cls,
        source: ModelSource | None = None,
        *,
        device: str = "cpu",
        dtype: str = "fp32",
        quant: str = "none",
        engine_config: EngineConfig | None = None,
        vocoder_dtype: str | None = None,
    ) -> TTS:
        """Load weights (the official release when ``source`` is None) and build the engine.

        ``auto`` modes go through the quality gate (:func:`load_model_gated`); ``vocoder_dtype``
        (default: the engine config's) too, and the engine then decodes audio in the mode chosen.

        Raises:
            CheckpointError: the weights are missing or damaged.
            DownloadError: the official release could not be downloaded.
        """
        config = engine_config or EngineConfig()
        model, gated = load_model_gated(source or ModelSource(), device=device, dtype=dtype, quant=quant,
                                        vocoder_dtype=vocoder_dtype or config.vocoder_dtype)  # fmt: skip
        return cls(model, dataclasses.replace(config, vocoder_dtype=gated.precision.vocoder_dtype))

    @property
    def sample_rate_hz(self) -> int:
        return self.model.sample_rate_hz

    def random_voice(self, seed: int) -> str:
        """An official voice string drawn from the checkpoint's speaker statistics."""
        return self.engine.runner.random_voice(seed)

    def voice_string(self, voice: str, seeds: Mapping[str, int]) -> str:
        """``voice`` as an official voice string: a voice string, or a mix (``a*0.7+b*0.3``) of voice strings
        and the names in ``seeds`` (each the seed voice :meth:`random_voice` draws).

        Raises:
            VoiceError: not a voice string of this checkpoint (a name not in ``seeds`` is not one either).
            VoiceMixError: a malformed mix.
        """
        hidden_size = self.model.config.gpt.hidden_size

        def vector(part: str) -> torch.Tensor:
            return decode_voice(self.random_voice(seeds[part]) if part in seeds else part, hidden_size)

        if not is_voice_mix(voice):
            vector(voice)  # checks the string
            return voice
        parts = parse_voice_mix(voice)
        return encode_voice(mix_voices([vector(part.name) for part in parts], [part.weight for part in parts]))

    def reference_from_audio(self, wav: np.ndarray, sample_rate_hz: int, transcript: str) -> VoiceReference:
        """A zero-shot voice from a clip: ``SynthesisParams(reference=...)`` then speaks in its voice.

        Args:
            wav: mono float samples (or (num_samples, channels), averaged to mono).
            sample_rate_hz: their rate; resampled to the model's 24 kHz with soxr.
            transcript: the words spoken in the clip.

        Returns:
            The official ``spk_smp`` string of the clip (``Chat.sample_audio_speaker``) and the transcript.

        Raises:
            InvalidInputError: the clip is too short for one code frame, or the transcript is empty or too long.
        """
        samples = np.asarray(wav, dtype=np.float32)
        mono = samples.mean(axis=1) if samples.ndim == 2 else samples.reshape(-1)
        at_model_rate = resample(mono, sample_rate_hz, self.sample_rate_hz)
        return VoiceReference(encode_reference(self.model.modules.dvae, at_model_rate), transcript)

    def reference_from_clip(
        self, data: bytes, transcript: str, limits: ReferenceLimits | None = None
    ) -> VoiceReference:
        """A zero-shot voice from an audio file's bytes (wav, flac, mp3, ogg/opus, m4a), checked as the server does.

        Raises:
            ReferenceTooLargeError: over ``limits.max_bytes``.
            ReferenceAudioError: empty, undecodable, silent, or outside the duration bounds.
            InvalidInputError: an empty or too long transcript.
        """
        VoiceReference("-", transcript)  # the transcript is checked before any decoding work
        samples = load_reference_clip(data, self.sample_rate_hz, limits or ReferenceLimits())
        return VoiceReference(encode_reference(self.model.modules.dvae, samples), transcript)

    def _run(self, texts: list[str], params: SynthesisParams, keep_hidden: bool) -> list[list[RequestOutput]]:
        ids = [f"api-{next(self._ids)}" for _ in texts]
        try:
            for request_id, text in zip(ids, texts, strict=True):
                self.engine.add_request(request_id, text, params, keep_hidden=keep_hidden)
            collected: dict[str, list[RequestOutput]] = {request_id: [] for request_id in ids}
            pending = set(ids)
            while pending:
                for output in self.engine.step():
                    collected[output.request_id].append(output)
                    if output.is_finished:
                        pending.discard(output.request_id)
            return [collected[request_id] for request_id in ids]
        except BaseException:
            for request_id in ids:
                self.engine.abort(request_id)
            raise

    def synthesize(self, texts: list[str] | str, params: SynthesisParams | None = None) -> list[np.ndarray]:
        """One float32 waveform (24 kHz, mono) per text, not trimmed or altered.

        Raises:
            InvalidInputError: a text is empty after cleaning, or a parameter or voice is invalid.
        """
        batch = [texts] if isinstance(texts, str) else list(texts)
        results = self._run(batch, params or SynthesisParams(), keep_hidden=False)
        return [
            np.concatenate([o.audio for o in outputs]) if outputs else np.zeros(0, np.float32) for outputs in results
        ]

    def synthesize_long(
        self, text: str, params: SynthesisParams | None = None, *, max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS
    ) -> np.ndarray:
        """One waveform for a long text, synthesized segment by segment (sentences, then clauses).

        The text is plain (a ``<speak>`` document's tags are removed as any markup is: for SSML's
        pauses and rates use ``turbotts say`` or the server), cleaned and cut by the server's own
        segmenter, :func:`~turbotts.text.segmenter.split_input`, so it gives the server's segments.

        With no voice at all (no ``voice``, ``voice_seed`` or ``reference``) each segment would
        be a new random speaker, so the first segment's audio becomes the reference clip of the
        rest (its codes and its text in their prompts), as the official ``infer(split_text=True)``
        does: one speaker from start to end. The first segment is kept as generated.

        Raises:
            InvalidInputError: nothing speakable in ``text``, or a bad parameter or voice.
        """
        params = params or SynthesisParams()
        items = split_input(text, is_ssml=False, max_segment_chars=max_segment_chars)
        segments = [item.text for item in items if isinstance(item, Utterance)]
        first = self.synthesize(segments[0], params)[0]
        rest_params = params
        has_voice = params.voice is not None or params.voice_seed is not None or params.reference is not None
        if len(segments) > 1 and not has_voice and first.size >= MIN_REFERENCE_SAMPLES:
            rest_params = replace(params, reference=self.reference_from_audio(first, self.sample_rate_hz, segments[0]))
        rest = self.synthesize(segments[1:], rest_params) if len(segments) > 1 else []
        return np.concatenate([first, *rest])

    def generate_codes(self, texts: list[str], params: SynthesisParams | None = None) -> list[CodeResult]:
        """The GPT's output per text: codes and hidden states, no audio decode needed by the caller."""
        results = []
        for outputs in self._run(list(texts), params or SynthesisParams(), keep_hidden=True):
            last = outputs[-1]
            hidden = last.hidden
            results.append(
                CodeResult(
                    codes=np.asarray(last.codes or [], dtype=np.int64).reshape(-1, self.model.config.gpt.num_vq),
                    hidden=hidden.float().numpy() if isinstance(hidden, torch.Tensor) and hidden.numel() else None,
                    finish_reason=last.finish_reason,
                    refined_text=last.refined_text,
                )
            )
        return results
