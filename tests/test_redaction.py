"""Redaction: request text never reaches a log line, in any of the ways it could be passed."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from turbotts.redaction import (
    JsonFormatter,
    RedactionFilter,
    describe_text,
    metric_label,
    request_id_var,
    sensitive_text,
    text_fields,
)

SECRET = "please say my bank password is hunter2"


@pytest.fixture()
def log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactionFilter())
    logger = logging.getLogger("turbotts.test.redact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_describe_text() -> None:
    described = text_fields(SECRET)
    assert described["text_len"] == len(SECRET) and len(described["text_sha256"]) == 12
    assert SECRET not in json.dumps(described)
    assert describe_text(SECRET) == f"sha256:{described['text_sha256']} ({len(SECRET)} chars)"


def test_extra_fields_are_replaced(log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log
    token = request_id_var.set("req-123")
    try:
        logger.info("synthesizing", extra={"text": SECRET, "input": SECRET, "voice": "alloy"})
    finally:
        request_id_var.reset(token)
    line = stream.getvalue()
    assert SECRET not in line and "hunter2" not in line
    entry = json.loads(line)
    assert entry["request_id"] == "req-123" and entry["level"] == "INFO" and entry["logger"] == "turbotts.test.redact"
    assert entry["message"] == "synthesizing" and entry["voice"] == "alloy" and entry["ts"].endswith("+00:00")
    assert entry["text_sha256"] == text_fields(SECRET)["text_sha256"] and entry["input_len"] == len(SECRET)


def test_registered_text_is_scrubbed_from_messages(log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log
    with sensitive_text(SECRET):
        logger.info("failed on %r", SECRET)
        try:
            raise ValueError(f"cannot say {SECRET}")
        except ValueError:
            logger.exception("synthesis failed")
    logger.info("after the request: %s", "other text")
    output = stream.getvalue()
    assert "hunter2" not in output and "other text" in output
    assert text_fields(SECRET)["text_sha256"] in output
    assert "ValueError: cannot say" not in output and "ValueError: sha256:" in output  # the message, as a digest


def test_formatter_alone_still_scrubs_fields() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "msg", None, None)
    record.text = SECRET
    assert "hunter2" not in JsonFormatter().format(record)


def test_caplog_sees_no_text(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("turbotts.test.caplog")
    logger.addFilter(RedactionFilter())
    try:
        with caplog.at_level(logging.INFO, logger="turbotts.test.caplog"):
            logger.info("request", extra={"text": SECRET})
    finally:
        logger.filters.clear()
    assert caplog.records and all("hunter2" not in repr(r.__dict__) for r in caplog.records)


def test_metric_label_is_bounded() -> None:
    assert metric_label("mp3", frozenset({"mp3", "wav"})) == "mp3"
    assert metric_label(SECRET, frozenset({"mp3", "wav"})) == "other"
