"""Loose ends, through a real server on loopback: a 500 carries ``X-Request-ID``, bodies are limited while
they arrive (413 before an oversized body is all sent), and static files have their own metric label."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.server.conftest import running_server
from tests.server.guards_util import SPEECH, metric
from turbotts.server.web.body_limit import json_body_limit
from turbotts.server.web.uploads import FORM_OVERHEAD_BYTES

MAX_INPUT_CHARS = 300
MAX_REFERENCE_BYTES = 256 * 1024
CHUNK = 64 * 1024
TOTAL = 16 * 2**20  # what the client would send if nobody stopped it
BOOM = "/test-only/boom"


class Boom(Exception):
    pass


def _with_failing_route(app: FastAPI) -> FastAPI:
    async def boom() -> None:
        raise Boom("the Zyxwq secret of an unexpected failure")

    app.add_api_route(BOOM, boom, methods=["GET"])
    return app


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("loose_ends")
    settings = {"max_input_chars": MAX_INPUT_CHARS, "max_reference_bytes": MAX_REFERENCE_BYTES}
    with running_server(tmp, wrap=_with_failing_route, **settings) as (url, _):
        yield url


def test_an_unexpected_500_carries_the_request_id_sent(server: str) -> None:
    response = httpx.get(f"{server}{BOOM}", headers={"X-Request-ID": "req-500-abc"}, timeout=30)
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "req-500-abc"
    error = response.json()["error"]
    assert error["code"] == "internal_error" and "Zyxwq" not in response.text


def test_an_unexpected_500_carries_a_generated_request_id(server: str) -> None:
    first = httpx.get(f"{server}{BOOM}", timeout=30)
    second = httpx.get(f"{server}{BOOM}", timeout=30)
    assert first.status_code == second.status_code == 500
    assert first.headers["content-type"] == "application/json" and first.json()["error"]["type"] == "server_error"
    assert first.headers.get("x-request-id") and second.headers.get("x-request-id")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert metric(server, "turbotts_request_duration_seconds_count", f'route="{BOOM}",status="500"') >= 2


def _chunked_upload(url: str, path: str, content_type: str, prefix: bytes) -> tuple[int, int, dict[str, Any], bytes]:
    """Send a huge chunked body slowly; returns (bytes sent when the answer came, status, JSON body, raw head)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        sock.sendall(head.encode())
        sent = 0
        data = prefix + b"a" * (CHUNK - len(prefix))
        while sent < TOTAL:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            sent += len(data)
            data = b"a" * CHUNK
            time.sleep(0.005)  # slowly: the server reads each chunk as it comes, no socket buffer fills up
        else:
            readable, _, _ = select.select([sock], [], [], 30)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    finally:
        sock.close()
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    return sent, int(status_line.split()[1]), json.loads(body), headers


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 1 << 30


@pytest.mark.parametrize(
    ("path", "content_type", "prefix", "limit"),
    [
        (SPEECH, "application/json", b'{"input": "', json_body_limit(MAX_INPUT_CHARS)),
        ("/v1/voices", "application/json", b'{"name": "x", "voice": "', MAX_REFERENCE_BYTES + FORM_OVERHEAD_BYTES),
        (
            "/v1/voices",
            "multipart/form-data; boundary=XyZ",
            b'--XyZ\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n\r\n',
            MAX_REFERENCE_BYTES + FORM_OVERHEAD_BYTES,
        ),
    ],
    ids=["speech_json", "voice_json", "voice_upload"],
)
def test_an_oversized_body_gets_413_before_it_is_all_sent(
    server: str, path: str, content_type: str, prefix: bytes, limit: int
) -> None:
    sent, status, body, headers = _chunked_upload(server, path, content_type, prefix)
    assert status == 413, body
    assert str(limit) in body["error"]["message"], body  # the answer names the limit
    assert b"x-request-id" in headers.lower()
    # the server stops at limit + one chunk; the client may have sent a few chunks more before it saw the answer
    assert limit < sent <= limit + 8 * CHUNK, (sent, limit)
    assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200


def test_a_declared_oversized_body_is_refused_before_it_is_sent(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {SPEECH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {TOTAL}\r\n\r\n".encode()
        )  # not one byte of the body
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert str(json_body_limit(MAX_INPUT_CHARS)) in body["error"]["message"]


def test_a_body_within_the_limit_still_speaks(server: str) -> None:
    response = httpx.post(f"{server}{SPEECH}", json={"input": "Still fine.", "response_format": "pcm"}, timeout=120)
    assert response.status_code == 200 and len(response.content) > 0


def test_static_files_have_their_own_route_label(server: str) -> None:
    labels = 'route="/static",status="200"'
    before = metric(server, "turbotts_request_duration_seconds_count", labels)
    for name in ("api.js", "playground.css"):
        assert httpx.get(f"{server}/static/{name}", timeout=30).status_code == 200
    assert metric(server, "turbotts_request_duration_seconds_count", labels) == before + 2
    assert metric(server, "turbotts_request_duration_seconds_count", 'route="unmatched",status="200"') == 0
