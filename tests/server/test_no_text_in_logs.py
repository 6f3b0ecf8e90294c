"""No piece of request text reaches a log line or /metrics, on any route, at DEBUG on every logger.

A real ``turbotts serve`` process (tiny dummy model, JSON logs, ``TURBOTTS_LOG_LEVEL=debug``, so
root, uvicorn, websockets and turbotts all log at DEBUG into the redacted root handlers) gets one
secret through every route: speech one-shot in every format, streamed, SSE, with the secret in
``instructions`` and as a (bad) voice, the WebSocket route, and the voices routes with a saved
voice whose name is part of the secret plus the whole secret in paths. The secret is built to
reach each place that logs about text:

* ``жзийкл`` and ``¥`` are outside the tiny vocabulary: ``map_unrepresentable`` drops them and
  warns (it used to print them, sorted: ``¥жзийкл``, whose 3-grams are the secret's);
* ``¥١٢٣٤`` next to Chinese makes cn2an raise on Arabic-Indic digits: ``normalize_zh``'s
  fallback warns (it used to print the text with ``%r``; before that, the request failed
  with a 500); ``共١٢٣个`` makes cn2an *warn* (``warnings.warn``, quoting a digit, to stderr,
  outside the JSON lines), which is why every output line must be JSON;
* a 106-letter word is over WordPiece's 100-character word limit: it encodes to ``[UNK]``, the
  only way past the front end to the tokenizer's unknown-character warning (used to be ``%r``);
* ``Kq7531xv`` is a saved voice's name: ``DELETE /v1/voices/Kq7531xv`` is an access-log path;
* BEL, zero-width characters and emoji are what ``sanitize`` removes.

Every 3-character piece of the secret and of its sanitized form is looked for in every output
line, raw and in the escaped forms a logger could print it in (JSON ``\\u``, ``repr``, percent
encoding). Pure-digit pieces (``753``) are kept; so that they cannot match by chance, values that
are machine-made and random per run are masked first: the ``ts`` field, client and server ports,
WebSocket handshake keys, and hex digests. Pieces that are two digits and a space (``46 ``) are
left out: they match machine-made sizes (websockets' ``[46 bytes]``), and any leak of them also
carries a neighbouring piece (``246``, ``6 z``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import websockets

from tests.server.guards_util import SPEECH
from turbotts.text.sanitize import sanitize

VOICE_NAME = "Kq7531xv"
LONG_WORD = "Wq" + "vzxj" * 26  # 106 letters: one word over the tokenizer's 100-character limit
SECRET = (
    f"{VOICE_NAME} жзийкл\x07 价格\u200b¥١٢٣٤元，🦄\u200d🔥 好吗。 {LONG_WORD} xwq\u200b\u2060pl 9246 zev. 共١٢٣个。"
)
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
_MASKS = (
    (re.compile(r"127\.0\.0\.1(?::|', )\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\bport=\d+"), "port=<port>"),
    (re.compile(r"process \[\d+"), "process [<pid>"),
    (re.compile(r"(?i)(sec-websocket-(?:key|accept)|host)(: )\S+"), r"\1\2<value>"),
    (re.compile(r"[0-9a-f]{12,}"), "<hex>"),
)


def _pieces() -> set[str]:
    pieces: set[str] = set()
    for text in (SECRET, sanitize(SECRET)):
        pieces |= {text[i : i + 3] for i in range(len(text) - 2)}
    return {p for p in pieces if p.strip() and not re.fullmatch(r"[\s.,，。]*|\s?\d{1,2}\s?", p)}


def _forms(piece: str) -> set[str]:
    """The ways a logger could print ``piece``: raw, JSON-escaped, repr-escaped, percent-encoded."""
    quoted = urllib.parse.quote(piece, safe="")
    forms = {piece, json.dumps(piece)[1:-1], repr(piece)[1:-1], quoted, quoted.lower()}
    return {f for f in forms if len(f) >= 3}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TURBOTTS_VOICES_DB": str(tmp_path / "voices.sqlite3"),
        "TURBOTTS_LOG_LEVEL": "debug",
        "TURBOTTS_MAX_NEW_TOKENS": "6",
        "TURBOTTS_RATE_LIMIT_RPS": "0",
        "TURBOTTS_SHUTDOWN_GRACE_S": "30",
    }
    command = [sys.executable, "-m", "turbotts", "serve", "--load-format", "dummy", "--dummy-size", "tiny",
               "--port", str(port), "--log-format", "json"]  # fmt: skip
    with (tmp_path / "server.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"turbotts serve did not become ready: {(tmp_path / 'server.log').read_text()[-2000:]}")


def _http_routes(url: str) -> dict[str, int | str]:
    """Every HTTP route with the secret; returns each call's status (or the transport error), by name."""
    statuses: dict[str, int | str] = {}
    body = {"input": SECRET, "max_new_tokens": 4, "instructions": SECRET}
    quoted = urllib.parse.quote(SECRET, safe="")
    with httpx.Client(base_url=url, timeout=300, headers={"X-Request-ID": "leakcheck-http"}) as http:

        def call(name: str, method: str, path: str, **kwargs: Any) -> None:
            try:
                with http.stream(method, path, **kwargs) as response:
                    content = b"".join(response.iter_bytes())
                    statuses[name] = response.status_code if content or response.status_code == 204 else "empty"
            except httpx.TransportError as exc:  # a server that fails mid-stream: reported, then the logs are read
                statuses[name] = type(exc).__name__

        call("voice create", "POST", "/v1/voices", json={"name": VOICE_NAME, "seed": 7})
        call("voice create, secret name", "POST", "/v1/voices", json={"name": SECRET, "seed": 7})
        call("voice list", "GET", "/v1/voices")
        for fmt in FORMATS:
            call(f"speech {fmt}", "POST", SPEECH, json={**body, "response_format": fmt, "seed": 5, "voice": VOICE_NAME})
        call("speech streamed", "POST", SPEECH, json={**body, "response_format": "wav"})
        call("speech sse", "POST", SPEECH, json={**body, "stream_format": "sse"})
        call("speech, secret voice", "POST", SPEECH, json={**body, "voice": SECRET})
        call("speech, bad field", "POST", SPEECH, json={**body, "speed": SECRET})
        call("voice get, secret path", "GET", f"/v1/voices/{quoted}?q={quoted}")
        call("voice delete, secret path", "DELETE", f"/v1/voices/{quoted}")
        call("voice delete", "DELETE", f"/v1/voices/{VOICE_NAME}")
    return statuses


async def _websocket(url: str) -> int:
    """The secret in two text messages; returns the number of audio frames."""
    ws_url = url.replace("http://", "ws://") + f"{SPEECH}/ws"
    half = len(SECRET) // 2
    async with websockets.connect(ws_url, additional_headers={"X-Request-ID": "leakcheck-ws"}) as ws:
        await ws.send(json.dumps({"type": "config", "response_format": "pcm", "max_new_tokens": 4}))
        for piece in (SECRET[:half], SECRET[half:]):
            await ws.send(json.dumps({"type": "text", "text": piece}, ensure_ascii=False))
        await ws.send(json.dumps({"type": "end"}))
        num_frames = 0
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                num_frames += 1
                continue
            event = json.loads(message)
            assert event["type"] == "done", event
            return num_frames


def _scanned(line: str) -> tuple[str, bool]:
    """The text to search in one output line (``ts`` dropped, JSON values also decoded), and whether it is JSON."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        text, is_json = line, False
    else:
        entry.pop("ts", None)
        values = [str(v) for v in entry.values()]
        text, is_json = "\n".join([json.dumps(entry, ensure_ascii=False), *values]), True
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text, is_json


def test_no_piece_of_request_text_in_logs_or_metrics(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start(tmp_path, port)
    try:
        statuses = _http_routes(url)
        try:
            num_ws_frames: int | str = asyncio.run(_websocket(url))
        except (websockets.WebSocketException, AssertionError) as exc:  # reported after the logs are read
            num_ws_frames = repr(exc)
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    lines = [line for line in (tmp_path / "server.log").read_text("utf-8").splitlines() if line.strip()]
    scanned = [_scanned(line) for line in lines]
    metric_lines = [line.rsplit(" ", 1)[0] if not line.startswith("#") else line for line in metrics.splitlines()]
    targets = [text for text, _ in scanned] + metric_lines
    pieces = _pieces()
    hits = [(target, sorted({p for p in pieces if any(f in target for f in _forms(p))})) for target in targets]
    hits = [(target, found_here) for target, found_here in hits if found_here]
    found = sorted({piece for _, found_here in hits for piece in found_here})
    num_json = sum(is_json for _, is_json in scanned)
    joined = "\n".join(lines)
    print(
        f"\nscanned {len(lines)} log lines ({num_json} JSON) and {len(metric_lines)} metrics lines "
        f"for {len(pieces)} secret pieces; found {len(found)} pieces in {len(hits)} lines; "
        f"access lines {joined.count('uvicorn.access')}, websocket frame lines {joined.count('TEXT [')}, "
        f"tokenizer [UNK] warnings {joined.count('[UNK] tokens')}, dropped-character warnings "
        f"{joined.count('cannot represent')}, cn2an fallbacks {joined.count('cn2an could not read')}"
    )
    print(f"statuses: {statuses}; websocket audio frames: {num_ws_frames}")
    for target, found_here in hits[:8]:
        print(f"  {found_here[:4]} in: {target[:240]}")
    assert not found
    assert num_json == len(lines), [line for line, (_, is_json) in zip(lines, scanned, strict=True) if not is_json]
    # the paths that used to leak ran, and now log digests
    assert "[UNK] tokens" in joined and "cannot represent" in joined and "cn2an could not read" in joined
    assert "/v1/voices/{sha256:" in joined and "TEXT [" in joined
    ok = {name for name in statuses if name.startswith("speech ") and "," not in name} | {"voice list"}
    assert all(statuses[name] == 200 for name in ok), statuses
    assert statuses["voice create"] == 201 and statuses["voice delete"] == 204, statuses
    assert statuses["voice create, secret name"] == 422 and statuses["voice delete, secret path"] == 404, statuses
    assert isinstance(num_ws_frames, int) and num_ws_frames > 0, num_ws_frames
