"""Watermark bit accuracy per response format, on real speech, through the server's encoders.

espeak-ng speaks a sentence (22,050 Hz, resampled to 24 kHz with soxr, leading and
trailing silence trimmed), the mark is
embedded, and each format goes through ``turbotts.server.audio.encoding.encode_audio``
and back through PyAV (libsndfile for wav/flac). For every excerpt of ``--excerpt-s``
seconds (hop ``--hop-s``) it measures the coded bit accuracy (the fraction of the 156
channel bits read correctly before Viterbi, ``watermark.coded_bit_accuracy``) and
whether ``detect`` returns exactly the embedded payload. Prints JSON:

    {"mp3": {"bit_rate_kbps": 64, "bit_accuracy": 0.998, "bit_accuracy_min": 0.987,
             "detected": true, "num_detected": 17, "num_excerpts": 17, ...}, ...}

``detected`` is true when every excerpt gave the payload. Needs espeak-ng on PATH and
the dev extras (soxr)::

    python scripts/watermark_accuracy.py --bit-rate-kbps 64
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.guard.watermark_speech

from tests.guard.watermark_speech import SENTENCE, espeak_speech, server_round_trip
from turbotts.guard.watermark import Payload, coded_bit_accuracy, detect, embed
from turbotts.server.audio.encoding import StreamEncoder

FORMATS = ("wav", "flac", "mp3", "opus", "aac")
KEY = bytes.fromhex("7e" * 32)
PAYLOAD = Payload(key_id=3, timestamp_min=29_000_000, request_hash=0xBEEF)


def measure(speech: np.ndarray, fmt: str, bit_rate_kbps: int | None, excerpt_s: float, hop_s: float) -> dict[str, Any]:
    """Accuracy and detection over every excerpt of one format's decoded audio."""
    decoded, rate_hz = server_round_trip(embed(speech, KEY, PAYLOAD), fmt, bit_rate_kbps=bit_rate_kbps)
    excerpt_len, hop = round(excerpt_s * rate_hz), round(hop_s * rate_hz)
    num_speech = round(len(speech) * rate_hz / 24_000)  # codec padding at the end is not speech
    accuracies, num_detected = [], 0
    for start in range(0, num_speech - excerpt_len + 1, hop):
        excerpt = decoded[start : start + excerpt_len]
        accuracies.append(coded_bit_accuracy(excerpt, rate_hz, KEY, PAYLOAD))
        num_detected += detect(excerpt, rate_hz, KEY) == PAYLOAD
    return {
        "bit_rate_kbps": StreamEncoder(fmt, bit_rate_kbps=bit_rate_kbps).bit_rate_kbps,  # None: lossless
        "bit_accuracy": round(float(np.mean(accuracies)), 4),
        "bit_accuracy_min": round(float(np.min(accuracies)), 4),
        "bit_accuracy_whole_clip": round(coded_bit_accuracy(decoded, rate_hz, KEY, PAYLOAD), 4),
        "detected": num_detected == len(accuracies),
        "detected_whole_clip": detect(decoded, rate_hz, KEY) == PAYLOAD,
        "num_detected": num_detected,
        "num_excerpts": len(accuracies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bit-rate-kbps", default="64", help="for mp3, opus and aac; 'default': the server's (128, 64, 96)"
    )
    parser.add_argument("--excerpt-s", type=float, default=2.0, help="excerpt length (default 2 s)")
    parser.add_argument("--hop-s", type=float, default=0.25, help="step between excerpts (default 0.25 s)")
    parser.add_argument("--text", default=SENTENCE, help="what espeak-ng says (default: a pangram, about 8 s)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma separated (default: all five)")
    args = parser.parse_args()
    speech = espeak_speech(args.text)
    bit_rate_kbps = None if args.bit_rate_kbps == "default" else int(args.bit_rate_kbps)
    results = {fmt: measure(speech, fmt, bit_rate_kbps, args.excerpt_s, args.hop_s) for fmt in args.formats.split(",")}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
