"""Frozen configuration per layer.

Every dimension of the model comes from here, so a tiny test checkpoint and the
full official one run through the same code. Defaults are the official 2Noise
release; a checkpoint's own files (``asset/gpt/config.json`` and an optional
root ``config.json``) override them through :func:`model_config_from_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from turbotts.errors import CheckpointError


@dataclass(frozen=True)
class GPTConfig:
    """Llama-style decoder over text tokens and 4 parallel audio-code streams."""

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    num_hidden_layers: int = 20
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    num_audio_tokens: int = 626
    num_text_tokens: int = 21178
    num_vq: int = 4

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise CheckpointError(
                f"hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}; check the GPT config.json"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError("num_attention_heads must be a multiple of num_key_value_heads")
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise CheckpointError(f"GPT config {f.name} must be positive")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def audio_eos_id(self) -> int:
        """The last audio code ends an utterance (625 in the release)."""
        return self.num_audio_tokens - 1


@dataclass(frozen=True)
class ConvDecoderConfig:
    """A ConvNeXt stack that maps (B, idim, T) features to mel (shared by the
    hidden-state Decoder and both halves of the DVAE)."""

    idim: int = 384
    odim: int = 384
    hidden: int = 512
    n_layer: int = 12
    bn_dim: int = 128


@dataclass(frozen=True)
class VQConfig:
    """Grouped residual FSQ of the DVAE (implicit codebook, no weights)."""

    dim: int = 1024
    levels: tuple[int, ...] = (5, 5, 5, 5)
    G: int = 2
    R: int = 2

    def __post_init__(self) -> None:
        if self.dim % self.G:
            raise CheckpointError(f"vq dim {self.dim} is not divisible by G={self.G}")


@dataclass(frozen=True)
class DVAEConfig:
    encoder: ConvDecoderConfig = ConvDecoderConfig(idim=512, odim=1024, hidden=256, n_layer=12, bn_dim=128)
    decoder: ConvDecoderConfig = ConvDecoderConfig(idim=512, odim=512, hidden=256, n_layer=12, bn_dim=128)
    vq: VQConfig = VQConfig()


@dataclass(frozen=True)
class VocosConfig:
    """Vocos backbone + ISTFT head; the mel front end settings are shared with the DVAE encoder."""

    input_channels: int = 100
    dim: int = 512
    intermediate_dim: int = 1536
    num_layers: int = 8
    n_fft: int = 1024
    hop_length: int = 256
    sample_rate_hz: int = 24000


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to build the ChatTTS modules of one checkpoint."""

    gpt: GPTConfig = GPTConfig()
    decoder: ConvDecoderConfig = ConvDecoderConfig()
    dvae: DVAEConfig = DVAEConfig()
    vocos: VocosConfig = VocosConfig()
    spk_stat: str | None = None  # base16384 fp16 (std, mean); None = the official statistics

    @property
    def sample_rate_hz(self) -> int:
        return self.vocos.sample_rate_hz

    @property
    def samples_per_code_frame(self) -> int:
        """One GPT step makes two mel frames of ``hop_length`` samples each."""
        return 2 * self.vocos.hop_length


def _pick(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _conv(data: dict[str, Any] | None, default: ConvDecoderConfig) -> ConvDecoderConfig:
    return replace(default, **_pick(ConvDecoderConfig, data or {}))


def model_config_from_dict(root: dict[str, Any] | None, gpt_json: dict[str, Any] | None) -> ModelConfig:
    """Build a ModelConfig from the fixture-style root ``config.json`` and the
    HF-style ``asset/gpt/config.json`` (either may be missing).

    Raises:
        CheckpointError: a value is inconsistent (for example heads that do not divide the width).
    """
    root = root or {}
    default = ModelConfig()
    gpt_kw: dict[str, Any] = {}
    if gpt_json:
        gpt_kw.update(_pick(GPTConfig, gpt_json))
        if gpt_json.get("num_key_value_heads") is None:
            gpt_kw["num_key_value_heads"] = gpt_kw.get("num_attention_heads", default.gpt.num_attention_heads)
    gpt_kw.update(_pick(GPTConfig, root.get("gpt", {})))
    gpt_kw.update(_pick(GPTConfig, root.get("embed", {})))
    if "num_attention_heads" in gpt_kw and "num_key_value_heads" not in gpt_kw:
        gpt_kw["num_key_value_heads"] = gpt_kw["num_attention_heads"]
    gpt = replace(default.gpt, **gpt_kw)

    dvae_raw = root.get("dvae", {})
    vq_raw = _pick(VQConfig, dvae_raw.get("vq", {}))
    if "levels" in vq_raw:
        vq_raw["levels"] = tuple(vq_raw["levels"])
    dvae = DVAEConfig(
        encoder=_conv(dvae_raw.get("encoder"), default.dvae.encoder),
        decoder=_conv(dvae_raw.get("decoder"), default.dvae.decoder),
        vq=replace(default.dvae.vq, **vq_raw),
    )
    vocos_raw = root.get("vocos", {})
    backbone = vocos_raw.get("backbone", {}).get("init_args", {})
    head = vocos_raw.get("head", {}).get("init_args", {})
    features = vocos_raw.get("feature_extractor", {}).get("init_args", {})
    vocos_kw = _pick(VocosConfig, backbone)
    vocos_kw.update({k: head[k] for k in ("n_fft", "hop_length") if k in head})
    if "sample_rate" in features:
        vocos_kw["sample_rate_hz"] = features["sample_rate"]
    return ModelConfig(
        gpt=gpt,
        decoder=_conv(root.get("decoder"), default.decoder),
        dvae=dvae,
        vocos=replace(default.vocos, **vocos_kw),
        spk_stat=root.get("spk_stat"),
    )


@dataclass(frozen=True)
class StreamingConfig:
    """When audio leaves the engine, in code frames (1 frame = 512 samples = 21.3 ms).

    After the first chunk, chunks double from ``chunk_frames`` up to
    ``max_chunk_frames``: early chunks keep latency low, later (larger) ones cut
    the share of frames decoded twice as context, which is what the vocoder
    costs on a CPU under load.

    A chunk is decoded with ``left_context_frames`` of already-emitted frames in
    front (so its start matches a one-shot decode) and holds back the last
    ``lookahead_frames`` (whose audio still depends on frames not generated yet),
    except at the end of the utterance.

    Measured on full-size random weights (120 frames, fp32), concatenated chunks
    against a one-shot decode: lookahead 8 -> max error 1.5e-2, 12 -> 1.5e-3,
    16 -> 1.1e-4, 24 -> 4e-7 (peak amplitude 0.35), with 16+ frames of left
    context. The default 12 is inaudible (-47 dB).

    The first chunk alone holds back ``first_chunk_lookahead_frames`` instead:
    time to first audio is (first_chunk_frames + that) decode steps, on every CPU
    and GPU alike, so 4 + 8 = 12 steps instead of 8 + 12 = 20 cuts it by 40%.
    The price is in the first 85 ms only: measured max error 1.0e-2 there
    (-30 dB of a 0.31 peak), largest in its last samples, and the chunk that
    follows it starts exact (seam jump 4e-4); lookahead 6 would give 3.3e-2.
    What it does not buy is headroom: a player that starts on the first byte is
    then ``lookahead_frames - first_chunk_lookahead_frames`` frames (85 ms) closer
    to running dry than with equal lookaheads, made up only as fast as the engine
    runs ahead of real time. A player that wants the old margin buffers that much
    more and starts no later than before; one that wants speed starts earlier.

    Under deadline scheduling a chunk may leave *late-and-smaller*: once a playing
    listener holds less than ``late_chunk_margin_s`` of audio, what is stable
    leaves now (at least ``min_late_chunk_frames``) instead of waiting for the
    planned size. Near real time a planned 96-frame chunk takes longer to make
    than a 1 s player buffer lasts (on a 2-core Zen 4 deadline scheduling kept
    1-2 more listeners gap-free than FIFO in three runs); leaving at the last moment keeps the chunk as large as
    the buffer allows, so the vocoder re-decodes no more context than it must.
    """

    first_chunk_frames: int = 4
    chunk_frames: int = 24
    max_chunk_frames: int = 96
    left_context_frames: int = 16
    lookahead_frames: int = 12
    first_chunk_lookahead_frames: int = 8
    late_chunk_margin_s: float = 0.3
    min_late_chunk_frames: int = 12

    def __post_init__(self) -> None:
        if self.first_chunk_frames < 1 or self.chunk_frames < 1:
            raise ValueError("chunk sizes must be at least one frame")
        if self.late_chunk_margin_s < 0 or self.min_late_chunk_frames < 1:
            raise ValueError("late_chunk_margin_s cannot be negative and min_late_chunk_frames must be at least 1")
        if self.max_chunk_frames < self.chunk_frames:
            raise ValueError("max_chunk_frames must be at least chunk_frames")
        if self.left_context_frames < 0 or self.lookahead_frames < 0 or self.first_chunk_lookahead_frames < 0:
            raise ValueError("context and lookahead cannot be negative")


#: How decode steps run. eager: per-slot attention over each slot's cache in place
#: (fastest on CPU); static: padded batch buckets with static buffers and masked
#: attention over the whole slot; graphs: static, captured as CUDA graphs (GPU);
#: auto: graphs on CUDA, eager elsewhere.
DECODE_MODES = ("auto", "eager", "static", "graphs")
#: realtime: a stream starts only while every running stream keeps real time (engine/realtime.py); off: FCFS.
ADMISSION_MODES = ("realtime", "off")
#: deadline: each step decodes the rows nearest their listeners' deadlines (engine/deadline.py); fifo: every row.
SCHEDULING_MODES = ("deadline", "fifo")
KV_DTYPES = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class EngineConfig:
    """Capacity and policy of one engine instance.

    Attributes:
        max_batch_size: sequences decoded together in one step.
        max_waiting: queued sequences before new work is refused (QueueFullError).
        kv_budget_bytes: memory the KV cache may take; it decides the slot count.
        max_seq_len: tokens (prompt + generated) one sequence may hold.
        max_prefill_tokens: prompt tokens prefilled in one step (bounds a step's latency).
        admission: ``realtime`` starts a stream only while every running stream stays at or
            above real time by ``realtime_margin`` (capacity learned from measured step times);
            ``off`` admits first come, first served up to ``max_batch_size``.
        realtime_margin: headroom over real time (0.2: 20 % more steps per second than playback needs).
        max_queue_wait_s: a stream whose estimated queue wait is longer is refused (503); 0 = never.
        realtime_capacity_override: a fixed real-time capacity in streams instead of the learned one.
        kv_dtype: storage of the KV cache: ``auto`` (bf16 where the fused int8 decode stack runs,
            else the GPT's dtype), ``fp32`` or ``bf16`` (half the bytes attention reads each step).
        scheduling: ``deadline`` decodes, past the real-time batch, the streams nearest their
            listeners' deadlines first and lets those far ahead sit out; ``fifo`` decodes every row.
        playback_buffer_s: audio a stream's player buffers, when the request does not say.
    """

    max_batch_size: int = 16
    max_waiting: int = 1024
    kv_budget_bytes: int = 4 * 2**30
    max_seq_len: int = 2048
    max_prefill_tokens: int = 4096
    streaming: StreamingConfig = StreamingConfig()
    decode_mode: str = "auto"  # auto | eager | static | graphs (see DECODE_MODES)
    vocoder_dtype: str = "fp32"  # fp32 | bf16 | auto: precision of the Decoder/DVAE + Vocos matmuls
    admission: str = "realtime"  # realtime | off (see ADMISSION_MODES)
    realtime_margin: float = 0.2
    max_queue_wait_s: float = 30.0
    realtime_capacity_override: int | None = None
    kv_dtype: str = "auto"  # auto | fp32 | bf16 (see KV_DTYPES)
    scheduling: str = "deadline"  # deadline | fifo (see SCHEDULING_MODES)
    playback_buffer_s: float = 1.0

    def __post_init__(self) -> None:
        if self.scheduling not in SCHEDULING_MODES:
            raise ValueError(f"scheduling must be deadline or fifo, not {self.scheduling!r}")
        if self.playback_buffer_s < 0:
            raise ValueError("playback_buffer_s cannot be negative")
        if self.admission not in ADMISSION_MODES:
            raise ValueError(f"admission must be realtime or off, not {self.admission!r}")
        if self.realtime_margin < 0 or self.max_queue_wait_s < 0:
            raise ValueError("realtime_margin and max_queue_wait_s cannot be negative")
        if self.realtime_capacity_override is not None and self.realtime_capacity_override < 0:
            raise ValueError("realtime_capacity_override cannot be negative")
        if self.vocoder_dtype not in ("fp32", "bf16", "auto"):
            raise ValueError(f"vocoder_dtype must be fp32, bf16 or auto, not {self.vocoder_dtype!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, not {self.kv_dtype!r}")
        if self.decode_mode not in DECODE_MODES:
            raise ValueError(f"decode_mode must be one of {', '.join(DECODE_MODES)}, not {self.decode_mode!r}")
        for name in ("max_batch_size", "max_waiting", "kv_budget_bytes", "max_seq_len", "max_prefill_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be positive")
