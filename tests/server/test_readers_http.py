"""Every response format, as the server sends it, read by four independent readers.

A seeded request is synthesized once and cached, so every format carries the same
samples; its ``pcm`` body gives the synthesized length. Each format is fetched as
an audio stream and as SSE deltas (concatenated), and encoded one-shot with
:func:`encode_audio` (the library path, exact headers). Every reader must decode
it at the right rate to at least the synthesized length and at most one codec frame
more than the codec's documented priming (:data:`DECODER_SLACK`).

Not every reader reads every format: libsndfile has no AAC decoder, and a browser
cannot decode header-less ``pcm`` (a web client wraps it in a WAV header itself).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from tests.server.audio import EXPECTED_RATE_HZ
from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH
from tests.server.readers import (
    DECODER_SLACK,
    ChromiumReader,
    chromium_reader,
    read_ffmpeg,
    read_ffprobe,
    read_pyav,
    read_soundfile,
)
from turbotts.server.audio.encoding import SUPPORTED_FORMATS, encode_audio

REQUEST = {"input": "Hello there. Every reader must hear the same thing.", "seed": 7}
TRANSPORTS = ("stream", "sse", "oneshot")
Reader = Callable[[bytes, str], tuple[int, int]]
READERS: dict[str, Reader] = {
    "pyav": read_pyav,
    "soundfile": read_soundfile,
    "ffmpeg": read_ffmpeg,
    "ffprobe": read_ffprobe,
}
UNSUPPORTED = {("soundfile", "aac"), ("chromium", "pcm")}


def _sse_audio(response: httpx.Response) -> bytes:
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")


@pytest.fixture(scope="module")
def bodies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], bytes]]:
    """``(format, transport) -> bytes``, plus ``("pcm", "reference")``: the synthesized samples."""
    found: dict[tuple[str, str], bytes] = {}
    # no watermark: its payload carries the minute, so requests either side of a minute boundary would differ
    server = running_server(tmp_path_factory.mktemp("readers"), max_new_tokens=40, watermark=False)
    with server as (url, _), httpx.Client(base_url=url, timeout=120) as http:
        reference = http.post(SPEECH, json={**REQUEST, "response_format": "pcm"})
        assert reference.status_code == 200
        found["pcm", "reference"] = reference.content
        pcm = np.frombuffer(reference.content, dtype="<i2").astype(np.float32) / 32767
        for fmt in SUPPORTED_FORMATS:
            streamed = http.post(SPEECH, json={**REQUEST, "response_format": fmt})
            sse = http.post(SPEECH, json={**REQUEST, "response_format": fmt, "stream_format": "sse"})
            assert streamed.status_code == sse.status_code == 200
            assert streamed.headers["x-cache"] == "l1", "the same seeded audio in every format"
            found[fmt, "stream"], found[fmt, "sse"] = streamed.content, _sse_audio(sse)
            found[fmt, "oneshot"] = encode_audio(pcm, fmt)
    yield found


@pytest.fixture(scope="module")
def chromium() -> Iterator[ChromiumReader]:
    with chromium_reader() as reader:
        yield reader


def _assert_duration(fmt: str, decoded: tuple[int, int], bodies: dict[tuple[str, str], bytes]) -> None:
    rate_hz, num_samples = decoded
    assert rate_hz == EXPECTED_RATE_HZ[fmt]
    num_synthesized = len(bodies["pcm", "reference"]) // 2 * rate_hz // 24000
    priming, frame = DECODER_SLACK[fmt]
    assert num_synthesized > 0
    assert num_synthesized <= num_samples <= num_synthesized + priming + frame, (
        f"{fmt}: decoded {num_samples} samples at {rate_hz} Hz, synthesized {num_synthesized}"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("fmt", SUPPORTED_FORMATS)
def test_reader_decodes_the_synthesized_duration(
    fmt: str, reader: str, transport: str, bodies: dict[tuple[str, str], bytes]
) -> None:
    if (reader, fmt) in UNSUPPORTED:
        pytest.skip(f"{reader} has no decoder for {fmt}")
    _assert_duration(fmt, READERS[reader](bodies[fmt, transport], fmt), bodies)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fmt", [f for f in SUPPORTED_FORMATS if ("chromium", f) not in UNSUPPORTED])
def test_chromium_decode_audio_data_gets_the_synthesized_duration(
    fmt: str, transport: str, bodies: dict[tuple[str, str], bytes], chromium: ChromiumReader
) -> None:
    _assert_duration(fmt, chromium.read(bodies[fmt, transport], EXPECTED_RATE_HZ[fmt]), bodies)


def test_streamed_wav_says_unknown_length_and_every_reader_reads_to_the_end(
    bodies: dict[tuple[str, str], bytes], chromium: ChromiumReader
) -> None:
    streamed, oneshot = bodies["wav", "stream"], bodies["wav", "oneshot"]
    assert struct.unpack("<I", streamed[4:8])[0] == struct.unpack("<I", streamed[40:44])[0] == 0xFFFFFFFF
    assert streamed[44:] == oneshot[44:] == bodies["pcm", "reference"]
    for read in READERS.values():
        assert read(streamed, "wav") == read(oneshot, "wav")
    assert chromium.read(streamed, 24000) == chromium.read(oneshot, 24000)


def test_flac_response_has_an_exact_streaminfo(bodies: dict[tuple[str, str], bytes]) -> None:
    flac = bodies["flac", "stream"]
    packed = int.from_bytes(flac[18:26], "big")  # STREAMINFO bytes 10..17: rate:20 ch:3 bps:5 total:36
    assert packed & ((1 << 36) - 1) == len(bodies["pcm", "reference"]) // 2  # not 0 ("unknown")
    assert int.from_bytes(flac[26:42], "big") != 0  # the MD5 of the samples is filled in
    assert flac == bodies["flac", "sse"]
