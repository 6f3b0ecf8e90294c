"""Speaker (voice) vectors: the official string format, random voices, and
conditioning the GPT input.

A ChatTTS voice is a float16 vector of the GPT width. The official string form,
which users copy between tools, is base16384 text of the vector's bytes
compressed with raw LZMA2 (preset 9 | extreme); we read and write exactly that.
The speaker statistics (std then mean, float16) are base16384 of the raw bytes,
*not* compressed. A random voice is ``randn(H) * std + mean`` in float16, drawn
from the global torch RNG when no generator is given (as the official does),
with torch's original float16 ``randn`` kernel (see :func:`randn_fp16`).

The voice enters the model by replacing the embedding at the ``[spk_emb]``
position with the L2-normalized vector. The normalization runs in float16 and is
then cast to float32, because that is what the official code does and doing it in
float32 differs by about 1e-4.
"""

from __future__ import annotations

import lzma
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pybase16384 as b14
import torch
import torch.nn.functional as F

from turbotts.errors import CheckpointError, VoiceError

_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
#: Widest voice decoded at all (the official GPT is 768 wide): a bound on decompression, so that
#: a 100 K-character string cannot expand to gigabytes (an LZMA bomb).
MAX_VOICE_VALUES = 8192


def _is_base16384(text: str) -> bool:
    """base16384 uses U+4E00..U+8DFF, plus one trailing U+3D01..U+3D06 length mark."""
    body = text[:-1] if text and "\u3d00" <= text[-1] <= "\u3d06" else text
    return bool(body) and all("\u4e00" <= ch <= "\u8dff" for ch in body)


def _b14_bytes(text: str, what: str) -> bytes:
    text = text.strip()
    if not _is_base16384(text):
        raise VoiceError(f"the {what} is not a base16384 string (expected CJK-range characters); copy it again in full")
    return b14.decode_from_string(text)


def encode_voice(voice: torch.Tensor) -> str:
    """The official string of a voice vector (cast to float16, compressed)."""
    raw = voice.detach().to(device="cpu", dtype=torch.float16).reshape(-1).numpy().tobytes()
    return b14.encode_to_string(lzma.compress(raw, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS))


def decode_voice(voice: str, hidden_size: int | None = None) -> torch.Tensor:
    """The float16 (H,) vector of an official voice string.

    Args:
        voice: base16384 text of LZMA2-compressed float16 bytes.
        hidden_size: the model's GPT width; when given, the length must match.

    Raises:
        VoiceError: not base16384, corrupt compressed data, more than ``MAX_VOICE_VALUES``
            values (a decompression bomb is refused before it expands), an odd byte count,
            a length that does not match ``hidden_size``, or non-finite values.
    """
    data = _b14_bytes(voice, "voice string")
    raw = _decompress(data, 2 * max(hidden_size or 0, MAX_VOICE_VALUES), "voice string")
    if len(raw) % 2:
        raise VoiceError(f"the voice decodes to {len(raw)} bytes, not a whole number of float16 values")
    vec = torch.from_numpy(np.frombuffer(raw, dtype=np.float16).copy())  # (H,)
    if hidden_size is not None and vec.numel() != hidden_size:
        raise VoiceError(
            f"the voice has {vec.numel()} values but this model's hidden size is {hidden_size}; "
            "it was made for a different model"
        )
    if not torch.isfinite(vec).all():
        raise VoiceError("the voice vector holds NaN or infinite values")
    return vec


def _decompress(data: bytes, max_bytes: int, what: str) -> bytes:
    """Raw LZMA2 streams one after another (as :func:`lzma.decompress` reads them), at most ``max_bytes`` out.

    Raises:
        VoiceError: corrupt or truncated data, or more than ``max_bytes`` once decompressed.
    """
    parts: list[bytes] = []
    num_bytes = 0
    while True:
        decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
        try:
            part = decompressor.decompress(data, max_length=max_bytes + 1 - num_bytes)
        except lzma.LZMAError as exc:
            raise VoiceError(f"the {what} is not valid LZMA2-compressed data ({exc}); copy it again in full") from exc
        parts.append(part)
        num_bytes += len(part)
        if num_bytes > max_bytes:
            raise VoiceError(f"the {what} decompresses to more than {max_bytes} bytes; it is not a ChatTTS voice")
        if not decompressor.eof:
            raise VoiceError(f"the {what} is not valid LZMA2 data (it ends too early); copy it again in full")
        data = decompressor.unused_data
        if not data:
            return b"".join(parts)


def encode_audio_prompt(codes: torch.Tensor) -> str:
    """The official ``spk_smp`` string of (num_vq, P) audio codes: the shape as two
    little-endian uint16, then LZMA2-compressed uint16 codes, all base16384."""
    if codes.dim() != 2:
        raise VoiceError(f"audio prompt codes must be 2-D (num_vq, P), got {tuple(codes.shape)}")
    arr = codes.detach().cpu().numpy().astype("<u2")
    head = np.array(arr.shape, dtype="<u2").tobytes()
    return b14.encode_to_string(head + lzma.compress(arr.tobytes(), format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS))


def decode_audio_prompt(text: str) -> torch.Tensor:
    """The (num_vq, P) int64 codes of an official ``spk_smp`` string.

    Raises:
        VoiceError: not base16384, corrupt, or a shape that does not match the data.
    """
    data = _b14_bytes(text, "audio prompt string")
    if len(data) < 4:
        raise VoiceError("the audio prompt string is too short to hold its shape")
    rows, cols = (int(x) for x in np.frombuffer(data[:4], dtype="<u2"))
    raw = _decompress(data[4:], 2 * rows * cols, "audio prompt string")  # never more than its header says
    codes = np.frombuffer(raw, dtype="<u2")
    if codes.size != rows * cols:
        raise VoiceError(f"the audio prompt holds {codes.size} codes, not the {rows}x{cols} its header says")
    return torch.from_numpy(codes.astype(np.int64)).view(rows, cols)


def encode_stat(std: torch.Tensor, mean: torch.Tensor) -> str:
    """The statistics string of a checkpoint: base16384 of raw float16 std then mean."""
    if std.shape != mean.shape or std.dim() != 1:
        raise ValueError(f"std and mean must be equal 1-D shapes, got {tuple(std.shape)} and {tuple(mean.shape)}")
    return b14.encode_to_string(torch.cat([std, mean]).to(device="cpu", dtype=torch.float16).numpy().tobytes())


@dataclass(frozen=True)
class SpeakerStats:
    """Per-dimension std and mean of the voices the model was trained on (float16)."""

    std: torch.Tensor  # (H,) float16
    mean: torch.Tensor  # (H,) float16

    @property
    def hidden_size(self) -> int:
        return self.std.numel()

    @classmethod
    def from_string(cls, text: str, hidden_size: int | None = None) -> SpeakerStats:
        """Read the base16384 statistics string (raw float16 std then mean).

        Raises:
            CheckpointError: the string is malformed or does not match ``hidden_size``.
        """
        try:
            data = _b14_bytes(text, "speaker statistics string")
        except VoiceError as exc:
            raise CheckpointError(str(exc)) from exc
        values = np.frombuffer(data, dtype=np.float16) if len(data) % 4 == 0 else None
        if values is None or (hidden_size is not None and values.size != 2 * hidden_size):
            raise CheckpointError(
                f"the speaker statistics hold {len(data)} bytes, not std and mean of "
                f"{hidden_size or 'the same'} float16 values; check spk_stat in config.json"
            )
        std, mean = torch.from_numpy(values.copy()).chunk(2)
        return cls(std=std, mean=mean)

    @classmethod
    def official(cls, hidden_size: int | None = None) -> SpeakerStats:
        """The statistics of the official release (shipped in ``turbotts/data``)."""
        text = (Path(__file__).resolve().parent.parent / "data" / "official_spk_stat.txt").read_text(encoding="utf-8")
        return cls.from_string(text, hidden_size)


def _box_muller_fp16(u: torch.Tensor) -> torch.Tensor:
    """Box-Muller on (n, 16) uniforms, rounding to float16 where torch's Half kernel did."""
    half = lambda x: x.half().float()  # noqa: E731
    u1, u2 = half(1 - u[:, :8]), u[:, 8:]  # (n, 8) each
    radius = half(torch.sqrt(-2 * half(torch.log(u1))))
    theta = half(2 * math.pi * u2.double())
    return torch.cat([radius * half(torch.cos(theta)), radius * half(torch.sin(theta))], dim=1).half()  # (n, 16)


def randn_fp16(num: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``torch.randn(num, dtype=float16)`` exactly as torch <= 2.9 computes it on CPU.

    Why not call ``torch.randn``: newer torch releases changed the float16 CPU
    kernel, so the same seed gives another voice. The original kernel draws
    11-bit uniforms (one 32-bit draw each; ``randint(0, 2048)`` consumes the
    same draws), transforms blocks of 16 with Box-Muller in float16, and redraws
    the last 16 values when ``num`` is not a multiple of 16. Keeping it makes a
    seed mean the same voice as in the official package on every torch version.
    """
    if num < 16:  # torch used a scalar double kernel here; no ChatTTS model is this narrow
        return torch.randn(num, dtype=torch.float16, generator=generator)
    uniform = torch.randint(0, 2048, (num,), generator=generator).float() / 2048  # (num,)
    full = num - num % 16
    out = torch.empty(num, dtype=torch.float16)
    out[:full] = _box_muller_fp16(uniform[:full].view(-1, 16)).view(-1)
    if num % 16:
        tail = torch.randint(0, 2048, (16,), generator=generator).float() / 2048
        out[num - 16 :] = _box_muller_fp16(tail.view(1, 16)).view(-1)
    return out


def sample_random_voice(stats: SpeakerStats, seed: int | torch.Generator | None = None) -> torch.Tensor:
    """A random float16 (H,) voice: ``randn(H) * std + mean``, as the official ``sample_random``.

    Args:
        stats: the model's speaker statistics.
        seed: an int seed, a CPU generator, or ``None`` for the global torch RNG
            (``torch.manual_seed(s)`` then this gives the official voice for ``s``).
    """
    generator = torch.Generator().manual_seed(seed) if isinstance(seed, int) else seed
    noise = randn_fp16(stats.hidden_size, generator)  # (H,)
    return noise.mul_(stats.std).add_(stats.mean)


def apply_speaker(emb: torch.Tensor, input_ids: torch.Tensor, spk_emb_id: int, voices: torch.Tensor) -> torch.Tensor:
    """Put each row's voice at its ``[spk_emb]`` position (out of place).

    Args:
        emb: (B, L, H) float32 input embeddings.
        input_ids: (B, L, num_vq) or (B, L) ids; the first stream is checked.
        spk_emb_id: id of ``[spk_emb]``.
        voices: (H,) for every row or (B, H), float16 (normalized here in float16).

    Returns:
        A new (B, L, H) tensor; rows without ``[spk_emb]`` are unchanged.
    """
    ids = input_ids[..., 0] if input_ids.dim() == 3 else input_ids  # (B, L)
    if voices.dim() == 1:
        voices = voices.unsqueeze(0).expand(emb.size(0), -1)  # (B, H)
    if voices.shape != (emb.size(0), emb.size(2)):
        raise VoiceError(
            f"voices must be ({emb.size(0)}, {emb.size(2)}) or ({emb.size(2)},), got {tuple(voices.shape)}"
        )
    unit = F.normalize(voices.to(torch.float16), p=2.0, dim=-1, eps=1e-12).to(device=emb.device, dtype=emb.dtype)
    is_spk = ids.eq(spk_emb_id).unsqueeze(-1)  # (B, L, 1)
    return torch.where(is_spk, unit.unsqueeze(1), emb)  # (B, L, H)
