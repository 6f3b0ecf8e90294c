"""The log filters the server installs: request paths hashed, WebSocket payloads hidden, tracebacks digested."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from turbotts.redaction import text_sha256
from turbotts.server.ops.context import (
    ProtocolRedactionFilter,
    RedactingFormatter,
    configure_logging,
    install_log_filter,
    redact_path,
)

PUBLIC = frozenset({"v1", "voices", "audio", "speech"})
SECRET = "жзийкл"


def test_redact_path_keeps_route_words_and_hashes_the_rest() -> None:
    assert redact_path("/v1/audio/speech", PUBLIC) == "/v1/audio/speech"
    name = "Kq7531xv"
    assert redact_path(f"/v1/voices/{name}", PUBLIC) == f"/v1/voices/{{sha256:{text_sha256(name)}}}"
    hashed = redact_path("/v1/voices/%D0%B6%D0%B7?q=%D0%B6", PUBLIC)
    assert hashed == f"/v1/voices/{{sha256:{text_sha256('жз')}}}?{{sha256:{text_sha256('q=ж')}}}"  # decoded first
    assert redact_path("/v1/voices/", PUBLIC) == "/v1/voices/"


class _Frame:  # the two attributes websockets' Frame has that the filter reads
    def __init__(self, data: bytes) -> None:
        self.opcode, self.data = type("Opcode", (), {"name": "TEXT"})(), data


@pytest.fixture()
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    # an in-process uvicorn started by an earlier test leaves its own handlers and propagate=False behind;
    # `turbotts serve` passes log_config=None, so its records reach the root handlers: reproduce that here
    uvicorn_loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.access", "uvicorn.error")]
    saved_uvicorn = [(lg.handlers[:], lg.propagate, lg.level) for lg in uvicorn_loggers]
    for lg in uvicorn_loggers:
        lg.handlers, lg.propagate, lg.level = [], True, logging.NOTSET
    stream = io.StringIO()
    configure_logging("debug", "text", stream=stream)  # what `turbotts serve --log-format text` does
    install_log_filter(PUBLIC)  # what the app's lifespan adds: the words of its routes
    try:
        yield stream
    finally:
        for lg, (handlers, propagate, level) in zip(uvicorn_loggers, saved_uvicorn, strict=True):
            lg.handlers, lg.propagate, lg.level = handlers, propagate, level
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_uvicorn_records_are_redacted_ours_are_not(captured: io.StringIO) -> None:
    access = logging.getLogger("uvicorn.access")
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "DELETE", "/v1/voices/Kq7531xv", "1.1", 204)
    logging.getLogger("uvicorn.error").debug("< %s", _Frame(f'{{"text": "{SECRET}"}}'.encode()))
    logging.getLogger("turbotts.test").info("voices db at %s", "/tmp/voices.sqlite3")
    output = captured.getvalue()
    assert "Kq7531xv" not in output and f"/{{sha256:{text_sha256('Kq7531xv')}}} HTTP/1.1" in output
    assert "жз" not in output and "< TEXT [24 bytes]" in output
    assert "/tmp/voices.sqlite3" in output  # only uvicorn's and websockets' arguments are rewritten
    assert sum(isinstance(f, ProtocolRedactionFilter) for f in logging.getLogger().handlers[0].filters) == 1


def test_text_format_digests_exception_messages(captured: io.StringIO) -> None:
    try:
        try:
            raise KeyError(SECRET)
        except KeyError as inner:
            raise ValueError(f"cannot read {SECRET!r}") from inner
    except ValueError:
        logging.getLogger("turbotts.test").exception("failed")
    output = captured.getvalue()
    assert SECRET[:3] not in output and "ValueError: cannot read" not in output
    assert "KeyError: sha256:" in output and "ValueError: sha256:" in output and "direct cause" in output
    assert "Traceback (most recent call last)" in output and "test_log_redaction.py" in output
    assert isinstance(logging.getLogger().handlers[0].formatter, RedactingFormatter)
