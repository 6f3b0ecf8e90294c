"""Keep request text out of logs and metrics.

Why: what users ask us to say is personal data. Logs and metric labels are
copied, shipped and kept for months, so they get a digest and a length instead
(``describe_text``), enough to correlate a complaint with a request (and with
the watermark's request hash) without storing the words.

Three layers, each cheap:

* :func:`turbotts.redaction.describe_text` (re-exported here) and :func:`text_fields`
  for code that wants to log about a text on purpose; the text front end and the
  tokenizer use the former directly, since they sit below this layer;
* :class:`RedactionFilter` (a ``logging.Filter``) that replaces ``text``/``input``
  fields passed in ``extra`` and any occurrence of the current request's text
  (registered with :func:`sensitive_text`) in the rendered message;
* :class:`JsonFormatter`, one JSON object per line with the time, level, logger,
  message and the ``request_id`` of the current context, which scrubs the same
  fields again, and renders tracebacks with every exception message as a digest
  (:func:`turbotts.redaction.redacted_traceback`), so a handler that forgot the
  filter still leaks nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from turbotts.redaction import describe_text, redacted_traceback, text_sha256

__all__ = [
    "JsonFormatter", "RedactionFilter", "describe_text", "metric_label",
    "request_id_var", "scrub", "sensitive_text", "text_fields",
]  # fmt: skip

request_id_var: ContextVar[str | None] = ContextVar("turbotts_request_id", default=None)
_sensitive_text_var: ContextVar[tuple[str, ...]] = ContextVar("turbotts_sensitive_text", default=())

SENSITIVE_FIELDS = frozenset({"text", "input", "prompt"})
_MIN_SCRUB_LEN = 4  # shorter strings are too common to replace inside messages
_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def text_fields(text: str) -> dict[str, Any]:
    """What may be logged about a text, as fields: a 12-hex SHA-256 prefix and its length in characters."""
    return {"text_sha256": text_sha256(text), "text_len": len(text)}


def _describe_field(name: str, value: object) -> dict[str, Any]:
    text = value if isinstance(value, str) else repr(value)
    return {f"{name}_sha256": text_sha256(text), f"{name}_len": len(text)}


@contextlib.contextmanager
def sensitive_text(*texts: str) -> Iterator[None]:
    """Within this block, these strings are replaced by their digest in every log message."""
    token = _sensitive_text_var.set(_sensitive_text_var.get() + tuple(t for t in texts if len(t) >= _MIN_SCRUB_LEN))
    try:
        yield
    finally:
        _sensitive_text_var.reset(token)


def scrub(message: str) -> str:
    """Replace the current request's registered texts in ``message`` by ``<text sha256=... len=...>``."""
    for text in _sensitive_text_var.get():
        if text in message:
            message = message.replace(text, f"<text {describe_text(text)}>")
    return message


class RedactionFilter(logging.Filter):
    """Rewrites records in place so no handler downstream can see request text.

    Attach it to handlers (``handler.addFilter``), so it also covers records
    propagated from child loggers.
    """

    def __init__(self, fields: Iterable[str] = SENSITIVE_FIELDS) -> None:
        super().__init__()
        self._fields = frozenset(fields)

    def filter(self, record: logging.LogRecord) -> bool:
        for name in self._fields & record.__dict__.keys():
            record.__dict__.update(_describe_field(name, record.__dict__.pop(name)))
        if _sensitive_text_var.get():
            message = scrub(record.getMessage())
            record.msg, record.args = message, None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, ``request_id``, extras."""

    def __init__(self, fields: Iterable[str] = SENSITIVE_FIELDS) -> None:
        super().__init__()
        self._fields = frozenset(fields)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub(record.getMessage()),
            "request_id": request_id_var.get(),
        }
        for name, value in record.__dict__.items():
            if name in _STANDARD_ATTRS or name.startswith("_"):
                continue
            if name in self._fields:
                entry.update(_describe_field(name, value))
            else:
                entry[name] = value
        if record.exc_info and record.exc_info[1] is not None:
            entry["exc"] = redacted_traceback(record.exc_info[1])
        return json.dumps(entry, default=str, ensure_ascii=False)


def metric_label(value: str, allowed: frozenset[str], other: str = "other") -> str:
    """A metric label from a closed set: anything else (a voice string, a text) becomes ``other``."""
    return value if value in allowed else other
