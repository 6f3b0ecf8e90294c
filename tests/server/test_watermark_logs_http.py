"""Watermarks in what the server sends (WAV, FLAC and mp3, cached or not), and request text kept out of its logs."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path

import httpx
import numpy as np

from tests.server.audio import decode
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH
from turbotts.guard.watermark import Payload, detect
from turbotts.server.ops.context import configure_logging

KEY_HEX = "5a" * 32
# The tiny model's audio is noise, the hardest cover for the mark: it needs about 8 s
# (real speech: 2 s, see turbotts/guard/watermark.py). 12 sentences make about 20 s.
TEXT = " ".join(f"Sentence number {n} of the watermark check is here." for n in range(12))


def _fetch(url: str, fmt: str) -> httpx.Response:
    body = {"input": TEXT, "response_format": fmt, "seed": 5, "max_new_tokens": 400}
    response = httpx.post(f"{url}{SPEECH}", json=body, timeout=300)
    assert response.status_code == 200
    return response


def test_wav_and_flac_carry_the_request_hash_and_no_watermark_has_none(tmp_path: Path) -> None:
    key = bytes.fromhex(KEY_HEX)
    text_hash = int(hashlib.sha256(TEXT.encode()).hexdigest()[:4], 16)  # = the logs' text_sha256[:4]
    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    with running_server(tmp_path / "on", max_new_tokens=400, watermark_key=KEY_HEX, watermark_key_id=9) as (url, _):
        wav = _fetch(url, "wav")
        flac = _fetch(url, "flac")
    assert (wav.headers["x-cache"], flac.headers["x-cache"]) == ("miss", "l1")  # the cached copy is marked too
    for response, fmt in ((wav, "wav"), (flac, "flac")):
        rate, samples = decode(response.content, fmt)
        assert samples.size / rate > 8
        payload = detect(samples, rate, key)
        assert payload is not None, fmt
        assert payload.key_id == 9 and payload.request_hash == text_hash
        assert detect(samples, rate, bytes.fromhex("a5" * 32)) is None  # another key finds nothing
    with running_server(tmp_path / "off", max_new_tokens=400, watermark=False) as (url, _):
        rate, plain = decode(_fetch(url, "wav").content, "wav")
    assert detect(plain, rate, key) is None
    _, marked = decode(wav.content, "wav")
    n = min(plain.size, marked.size)
    mark = marked[:n] - plain[:n]  # same seed: the difference is the mark (and 16-bit rounding)
    snr_db = 10 * np.log10(np.sum(plain[:n] ** 2) / np.sum(mark**2))
    assert 25 < snr_db < 35, snr_db


def test_mp3_at_64_kbps_over_http_carries_the_exact_payload(tmp_path: Path) -> None:
    """The streamed mp3 body (LAME at the server's ``mp3_bit_rate_kbps=64``), decoded by PyAV, holds the payload."""
    key = bytes.fromhex(KEY_HEX)
    text_hash = int(hashlib.sha256(TEXT.encode()).hexdigest()[:4], 16)
    settings = {"max_new_tokens": 400, "watermark_key": KEY_HEX, "watermark_key_id": 9, "mp3_bit_rate_kbps": 64}
    with running_server(tmp_path, **settings) as (url, _):
        before_min = int(time.time() // 60)
        response = _fetch(url, "mp3")
        after_min = int(time.time() // 60)
    assert response.headers["content-type"] == "audio/mpeg"
    rate, samples = decode(response.content, "mp3")
    duration_s = samples.size / rate
    assert duration_s > 8
    assert 0.9 * 64 < len(response.content) * 8 / duration_s / 1000 < 1.1 * 64  # the setting reached LAME
    payload = detect(samples, rate, key)
    assert payload is not None
    assert before_min <= payload.timestamp_min <= after_min
    assert payload == Payload(key_id=9, timestamp_min=payload.timestamp_min, request_hash=text_hash)
    assert detect(samples, rate, bytes.fromhex("a5" * 32)) is None


def test_request_text_never_reaches_a_log_line(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)  # what `turbotts serve` does, into a buffer
    secret = "Zebra quartz marmalade seventeen, a distinctive secret phrase."
    try:
        with running_server(tmp_path, blocklist=_blocklist(tmp_path)) as (url, _):
            ok = httpx.post(f"{url}{SPEECH}", json={"input": secret, "response_format": "pcm", "max_new_tokens": 4})
            blocked = httpx.post(f"{url}{SPEECH}", json={"input": f"{secret} forbiddenword", "max_new_tokens": 4})
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
    assert ok.status_code == 200 and blocked.status_code == 400
    output = stream.getvalue()
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert lines and "Zebra" not in output and "marmalade" not in output
    digest = hashlib.sha256(secret.encode()).hexdigest()[:12]
    speech_lines = [entry for entry in lines if digest in entry["message"]]
    assert speech_lines and speech_lines[0]["request_id"] == ok.headers["x-request-id"]
    assert f"text_len={len(secret)}" in speech_lines[0]["message"]


def _blocklist(tmp_path: Path) -> Path:
    path = tmp_path / "blocklist.txt"
    path.write_text("forbiddenword\n")
    return path
