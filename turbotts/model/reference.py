"""Zero-shot voices: a reference clip -> the official ``spk_smp`` string, and back to prompt codes.

The official ``Chat.sample_audio_speaker`` runs the DVAE encoder on a 24 kHz mono
clip and stores the (num_vq, T) codes as an ``spk_smp`` string; ``_infer_code``
decodes that string and appends the codes after ``[Ptts]``. We produce the same
string for the same samples (golden case j6), so strings move freely between the
official package and TurboTTS. Decoding and resampling of uploaded files is not
here (see :mod:`turbotts.audio`): this module takes samples at the model's rate.
"""

from __future__ import annotations

import numpy as np
import torch

from turbotts.errors import VoiceError
from turbotts.model.dvae import DVAE
from turbotts.model.speaker import decode_audio_prompt, encode_audio_prompt


def encode_reference(dvae: DVAE, wav: np.ndarray | torch.Tensor) -> str:
    """The official ``spk_smp`` string of a mono clip at the model's sample rate (24 kHz).

    Args:
        dvae: the checkpoint's DVAE (its encoder half).
        wav: (num_samples,) float samples; at least 513.

    Raises:
        InvalidInputError: the clip is too short for one code frame.
    """
    samples = torch.as_tensor(np.asarray(wav, dtype=np.float32)).reshape(-1)  # (N,)
    device = next(dvae.parameters()).device
    codes = dvae.encode(samples.to(device))  # (num_vq, T)
    return encode_audio_prompt(codes)


def reference_codes(spk_smp: str, num_vq: int, num_codes: int) -> list[list[int]]:
    """The prompt codes of an ``spk_smp`` string, one list of ``num_vq`` ids per frame: (P, num_vq).

    Args:
        spk_smp: an official audio-prompt string.
        num_vq: the GPT's code streams (the string's first dimension must match).
        num_codes: codes per stream that are audio (the EOS id and above are refused).

    Raises:
        VoiceError: a corrupt string, the wrong number of streams, no frames, or an id out of range.
    """
    codes = decode_audio_prompt(spk_smp)  # (num_vq, P)
    if codes.size(0) != num_vq or codes.size(1) == 0:
        raise VoiceError(
            f"the audio prompt holds {tuple(codes.shape)} codes; this model needs ({num_vq}, P>0). "
            "It was made for another model; encode the clip again"
        )
    if int(codes.max()) >= num_codes:
        raise VoiceError(f"the audio prompt holds code ids >= {num_codes}; it is not a DVAE encoding of a clip")
    return codes.t().tolist()  # (P, num_vq)
