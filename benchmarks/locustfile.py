"""Locust load test of ``POST /v1/audio/speech`` for teams that run locust (``turbotts loadtest`` is ours).

Each simulated user posts a text, reads the streamed audio as it arrives and reports
three entries to locust's statistics:

* ``POST speech``: locust's own entry (its time: until the response headers) and pass/fail;
* ``TTFA ttfa``: request start to the first audio bytes, the latency a listener hears;
* ``STREAM stream``: request start to the last byte (its length: the audio bytes).

TTFA is a custom metric fired on locust's ``request`` event, so it gets percentiles, the
web UI chart and ``--csv`` columns like any request. Run it (locust is not a TurboTTS
dependency: ``pip install locust``)::

    turbotts serve --load-format dummy &
    locust -f benchmarks/locustfile.py --host http://127.0.0.1:8000 \\
        --headless -u 16 -r 4 -t 60s --csv out/locust --tts-format pcm

Options (besides locust's own): ``--tts-format`` (pcm, wav, mp3, opus, aac, flac),
``--tts-voice``, ``--tts-max-new-tokens``, ``--tts-texts FILE`` (one text a line),
``--tts-api-key`` (or ``TURBOTTS_API_KEY``). No turbotts import: it runs on a load
machine without torch.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from locust import HttpUser, between, events, task

DEFAULT_TEXTS = (
    "Hello there.",
    "你好，欢迎光临。",
    "The quick brown fox jumps over the lazy dog, and then it takes a long nap in the sun.",
    "今天天气很好，我们一起去公园散步吧，顺便买一杯咖啡。",
    "Thank you for calling. Your call is important to us. Please stay on the line and the next available "
    "agent will be with you shortly.",
)
SPEECH_PATH = "/v1/audio/speech"
CHUNK_BYTES = 4096


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    parser.add_argument("--tts-format", default="pcm", help="response_format of every request")
    parser.add_argument("--tts-voice", default="alloy", help="a built-in or saved voice name")
    parser.add_argument("--tts-max-new-tokens", type=int, default=0, help="code frames per segment; 0: the server's")
    parser.add_argument("--tts-texts", default="", help="UTF-8 file, one text a line (default: a built-in mix)")
    parser.add_argument("--tts-api-key", default=os.environ.get("TURBOTTS_API_KEY", ""), help="bearer key")


def _texts(path: str) -> tuple[str, ...]:
    if not path:
        return DEFAULT_TEXTS
    texts = tuple(line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())
    if not texts:
        raise SystemExit(f"--tts-texts {path} holds no text")
    return texts


class SpeechUser(HttpUser):
    """One listener: asks for speech, plays it as it streams, pauses, asks again."""

    wait_time = between(1.0, 3.0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.texts = _texts(options.tts_texts)
        self.body: dict[str, Any] = {"voice": options.tts_voice, "response_format": options.tts_format}
        if options.tts_max_new_tokens > 0:
            self.body["max_new_tokens"] = options.tts_max_new_tokens
        self.headers = {"Authorization": f"Bearer {options.tts_api_key}"} if options.tts_api_key else {}

    @task
    def speech(self) -> None:
        body = {**self.body, "input": random.choice(self.texts)}
        started = time.perf_counter()
        ttfa_s: float | None = None
        num_bytes = 0
        with self.client.post(
            SPEECH_PATH, json=body, headers=self.headers, stream=True, catch_response=True, name="speech"
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            for chunk in response.iter_content(CHUNK_BYTES):
                if chunk and ttfa_s is None:
                    ttfa_s = time.perf_counter() - started
                num_bytes += len(chunk)
            if ttfa_s is None:
                response.failure("200 with no audio bytes")
                return
            response.success()
        total_s = time.perf_counter() - started
        self._report("TTFA", ttfa_s, 0)
        self._report("STREAM", total_s, num_bytes)

    def _report(self, kind: str, seconds: float, num_bytes: int) -> None:
        self.environment.events.request.fire(
            request_type=kind, name="ttfa" if kind == "TTFA" else "stream", response_time=1000 * seconds,
            response_length=num_bytes, exception=None, context={},
        )  # fmt: skip
