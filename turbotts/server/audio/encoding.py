"""Turn float32 mono PCM into the bytes of an OpenAI ``response_format``, incrementally.

One :class:`StreamEncoder` serves one HTTP response: the server feeds it the chunks
the engine streams and forwards whatever bytes come back at once, so a client hears
the first words before the rest is synthesized. Concatenating every returned piece
(including :meth:`StreamEncoder.finish`) gives a complete, valid file.

What each format does when streamed:

- ``pcm``: raw 16-bit little-endian mono samples, no header (OpenAI's ``pcm``).
- ``wav``: a 44-byte header first, then 16-bit PCM. The total length is unknown while
  streaming, so the RIFF and data sizes are ``0xFFFFFFFF`` (as OpenAI's streamed wav
  does); readers such as ffmpeg and libsndfile then read to the end of the stream.
  :func:`encode_audio` knows the length and writes the true sizes.
- ``mp3`` (LAME 128 kbit/s at 24 kHz), ``opus`` (libopus 64 kbit/s at 48 kHz in Ogg) and
  ``aac`` (96 kbit/s, raw ADTS frames): PyAV muxes into an in-memory sink that is
  drained after every call. The container header is written when the encoder is
  built, so the first :meth:`~StreamEncoder.encode` always returns bytes. Streamed
  mp3 has no Xing/LAME header (it needs a seekable file); the one-shot path has it.
- ``flac`` (16-bit) is buffered, not streamed: :meth:`~StreamEncoder.encode` returns
  ``b""`` and :meth:`~StreamEncoder.finish` the whole file. Why: a FLAC stream of
  unknown length says so with ``total samples = 0`` in STREAMINFO (what PyAV writes
  when it cannot seek back), and libsndfile (``soundfile``) cannot read such a file:
  it reports 2**63 - 1 frames, ``soundfile.read`` fails with "array is too big" and
  reading in blocks fails at the end with a seek error. Only a header written after
  the last sample (exact sample count, min/max frame sizes, MD5) is read by every
  reader, so FLAC answers arrive when synthesis ends; pick pcm, wav, mp3, opus or
  aac for low-latency streaming.

Opus only runs at 48 kHz, so its input is resampled and the stream reports 48000 Hz;
every other format keeps the input rate. The bit rates above are the defaults; a
server picks others per format (``mp3_bit_rate_kbps`` and friends in its settings),
which is how an operator trades bandwidth for quality (the watermark survives 64 kbit/s
in every lossy format, tests/guard/test_watermark_codecs.py).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import cast

import av
import numpy as np
from av.audio.stream import AudioStream

from turbotts.errors import InvalidInputError, TurboTTSError

SUPPORTED_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}

#: the bit rate each lossy format is encoded at unless told otherwise, and the range it accepts
#: (mono at 24 kHz: MPEG-2 layer III stops at 160, libopus mono at 256, AAC-LC near 128)
DEFAULT_BIT_RATES_KBPS = {"mp3": 128, "opus": 64, "aac": 96}
BIT_RATE_RANGES_KBPS = {"mp3": (8, 160), "opus": (6, 256), "aac": (8, 128)}
#: formats whose header must carry the exact length (see the module docstring)
BUFFERED_FORMATS = frozenset({"flac"})
_STREAMING_SIZE = 0xFFFFFFFF  # "unknown length" in a streamed WAV header
_INT16_SCALE = 32767.0


@dataclass(frozen=True)
class _CodecSpec:
    """How one compressed format is produced with PyAV."""

    container: str
    codecs: tuple[str, ...]  # first available wins
    sample_format: str
    codec_rate_hz: int | None = None  # None: keep the input rate
    codec_options: dict[str, str] = field(default_factory=dict)
    container_options: dict[str, str] = field(default_factory=dict)


_CODEC_SPECS = {
    "mp3": _CodecSpec("mp3", ("libmp3lame", "mp3"), "fltp"),
    # page_duration (µs) caps how long Ogg holds packets before writing a page.
    "opus": _CodecSpec(
        "ogg",
        ("libopus", "opus"),
        "flt",
        codec_rate_hz=48_000,
        codec_options={"application": "audio"},
        container_options={"page_duration": "60000"},
    ),
    # The "fast" coder: the default two-loop search costs much more time for no audible gain on speech.
    "aac": _CodecSpec("adts", ("aac",), "fltp", codec_options={"aac_coder": "fast"}),
    "flac": _CodecSpec("flac", ("flac",), "s16"),
}


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """Clip float samples to [-1, 1] and quantize them to 16 bits (NaN becomes silence)."""
    clean = np.nan_to_num(pcm, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.round(np.clip(clean, -1.0, 1.0) * _INT16_SCALE).astype("<i2")


def wav_header(sample_rate_hz: int, num_data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM16 mono WAV header; ``None`` means "streaming, length unknown"."""
    if num_data_bytes is None:
        riff_size = data_size = _STREAMING_SIZE
    else:
        riff_size, data_size = 36 + num_data_bytes, num_data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate_hz, sample_rate_hz * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data_size)
    )


def _as_mono_float(pcm: np.ndarray) -> np.ndarray:
    array = np.asarray(pcm, dtype=np.float32)
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise InvalidInputError(
            f"expected mono audio of shape (num_samples,), got shape {array.shape}; mix down to one channel first"
        )
    return array


class _ByteSink:
    """A write-only file for PyAV: no ``seek``, so muxers stream instead of patching headers."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class _AvWriter:
    """Encoder + muxer for one compressed stream; the only code here that touches PyAV."""

    def __init__(self, spec: _CodecSpec, sample_rate_hz: int, is_seekable: bool, bit_rate: int | None) -> None:
        self._input_rate_hz = sample_rate_hz
        self._sink: _ByteSink | io.BytesIO = io.BytesIO() if is_seekable else _ByteSink()
        options = {"flush_packets": "1", **spec.container_options}
        self._container = av.open(self._sink, mode="w", format=spec.container, options=options)
        codec_name = next((c for c in spec.codecs if c in av.codecs_available), spec.codecs[-1])
        self.codec_rate_hz = spec.codec_rate_hz or sample_rate_hz
        stream = self._container.add_stream(codec_name, rate=self.codec_rate_hz, layout="mono")
        self._stream = cast(AudioStream, stream)  # an audio codec always gives an audio stream
        self._stream.codec_context.format = spec.sample_format
        if bit_rate is not None:
            self._stream.codec_context.bit_rate = bit_rate
        self._stream.codec_context.options = dict(spec.codec_options)
        self._resampler = av.AudioResampler(format=spec.sample_format, layout="mono", rate=self.codec_rate_hz)
        self._is_int16 = spec.sample_format == "s16"
        self._next_pts = 0
        self._container.start_encoding()  # header bytes now, so the first encode() returns something

    def encode(self, samples: np.ndarray) -> bytes:
        if samples.size:
            if self._is_int16:
                frame = av.AudioFrame.from_ndarray(to_int16(samples)[None, :], format="s16", layout="mono")
            else:
                clipped = np.clip(np.nan_to_num(samples), -1.0, 1.0)[None, :]  # (1, T)
                frame = av.AudioFrame.from_ndarray(clipped, format="flt", layout="mono")
            frame.sample_rate = self._input_rate_hz
            frame.pts = self._next_pts
            self._next_pts += samples.size
            self._mux(self._resampler.resample(frame))
        return self._drain()

    def finish(self) -> bytes:
        self._mux(self._resampler.resample(None))
        self._container.mux(self._stream.encode(None))
        self._container.close()
        if isinstance(self._sink, io.BytesIO):
            return self._sink.getvalue()
        return self._sink.drain()

    def close(self) -> None:
        self._container.close()

    def _mux(self, frames: list[av.AudioFrame]) -> None:
        for frame in frames:
            self._container.mux(self._stream.encode(frame))

    def _drain(self) -> bytes:
        return self._sink.drain() if isinstance(self._sink, _ByteSink) else b""


def _check_bit_rate(fmt: str, bit_rate_kbps: int | None) -> int | None:
    """The bit rate to use for ``fmt`` (None for lossless formats)."""
    if fmt not in DEFAULT_BIT_RATES_KBPS:
        return None
    if bit_rate_kbps is None:
        return DEFAULT_BIT_RATES_KBPS[fmt]
    low, high = BIT_RATE_RANGES_KBPS[fmt]
    if not low <= bit_rate_kbps <= high:
        raise InvalidInputError(f"{fmt} bit rate must be {low}-{high} kbit/s, not {bit_rate_kbps}; pick one in range")
    return bit_rate_kbps


class StreamEncoder:
    """Incremental encoder for one response: feed float32 mono chunks, get bytes as soon as the codec has them."""

    def __init__(
        self,
        fmt: str,
        sample_rate_hz: int = 24000,
        *,
        is_seekable: bool = False,
        bit_rate_kbps: int | None = None,
    ) -> None:
        """Start an encoder.

        Args:
            fmt: one of :data:`SUPPORTED_FORMATS`.
            sample_rate_hz: rate of the samples passed to :meth:`encode`.
            is_seekable: buffer everything so the muxer can patch headers (mp3 Xing,
                flac STREAMINFO); ``encode`` then returns ``b""`` and ``finish`` the
                whole file. Always on for :data:`BUFFERED_FORMATS`.
            bit_rate_kbps: for mp3, opus and aac, within :data:`BIT_RATE_RANGES_KBPS`;
                None takes :data:`DEFAULT_BIT_RATES_KBPS`. Ignored by lossless formats.

        Raises:
            InvalidInputError: the format is not supported, or the bit rate is out of range.
        """
        if fmt not in SUPPORTED_FORMATS:
            raise InvalidInputError(f"unsupported response_format {fmt!r}; use one of {', '.join(SUPPORTED_FORMATS)}")
        if sample_rate_hz <= 0:
            raise InvalidInputError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        self.fmt = fmt
        self.is_buffered = is_seekable or fmt in BUFFERED_FORMATS
        self.bit_rate_kbps = _check_bit_rate(fmt, bit_rate_kbps)
        self._writer = None
        if fmt in _CODEC_SPECS:
            bit_rate = None if self.bit_rate_kbps is None else 1000 * self.bit_rate_kbps
            self._writer = _AvWriter(_CODEC_SPECS[fmt], sample_rate_hz, self.is_buffered, bit_rate)
        self._pending = wav_header(sample_rate_hz) if fmt == "wav" else b""
        self._is_finished = False
        #: the rate a decoder reports for the produced stream (48000 for opus)
        self.output_sample_rate_hz = self._writer.codec_rate_hz if self._writer else sample_rate_hz

    @property
    def content_type(self) -> str:
        """The HTTP ``Content-Type`` for this format."""
        return CONTENT_TYPES[self.fmt]

    def encode(self, pcm: np.ndarray) -> bytes:
        """Encode one chunk of float32 samples in [-1, 1] (clipped); return the bytes ready so far (maybe ``b""``)."""
        if self._is_finished:
            raise TurboTTSError("this StreamEncoder has finished; create a new one for each response")
        samples = _as_mono_float(pcm)
        head, self._pending = self._pending, b""
        if self._writer is not None:
            return head + self._writer.encode(samples)
        return head + to_int16(samples).tobytes()

    def finish(self) -> bytes:
        """Flush the codec and close the container; return the last bytes. Call exactly once."""
        if self._is_finished:
            raise TurboTTSError("StreamEncoder.finish() was already called; create a new encoder per response")
        self._is_finished = True
        head, self._pending = self._pending, b""
        return head + (self._writer.finish() if self._writer is not None else b"")

    def close(self) -> None:
        """Release the codec without finishing (the client went away); safe to call more than once."""
        if not self._is_finished and self._writer is not None:
            self._writer.close()
        self._is_finished = True


def encode_audio(pcm: np.ndarray, fmt: str, sample_rate_hz: int = 24000, *, bit_rate_kbps: int | None = None) -> bytes:
    """Encode a whole clip at once, with exact sizes in the headers.

    Unlike the streamed form, wav carries its true RIFF/data sizes, mp3 a Xing/LAME
    header (exact duration and gapless trimming) and flac its sample count and MD5.
    ``bit_rate_kbps`` is as for :class:`StreamEncoder`.

    Raises:
        InvalidInputError: unknown format, a bit rate out of range, or audio that is not mono.
    """
    samples = _as_mono_float(pcm)
    if fmt == "wav":
        data = to_int16(samples).tobytes()
        return wav_header(sample_rate_hz, len(data)) + data
    encoder = StreamEncoder(fmt, sample_rate_hz, is_seekable=True, bit_rate_kbps=bit_rate_kbps)
    return encoder.encode(samples) + encoder.finish()
