"""Keep user text out of logs and metrics: a digest and a length, never the words.

Why: what users ask us to say is personal data. Logs and metric labels are copied,
shipped and kept for months, so they get a digest and a length instead, enough to
match a complaint (whose text the user supplies) with its request, and with the
watermark's request hash, without storing the words. The digest is the first 12 hex
digits of SHA-256 over UTF-8 (``text_sha256``).

Why in the base layer: the text front end and the tokenizer log about the text they
clean, and they sit below ``guard/`` and ``server/``; one module keeps the rule
"digest and length only" in one place. Three layers, each cheap:

* :func:`describe_text`, :func:`text_fields` and :func:`describe_exception` for code
  that logs about a text on purpose;
* :class:`RedactionFilter` (a ``logging.Filter``) that replaces ``text``/``input``
  fields passed in ``extra`` and any occurrence of the current request's text
  (registered with :func:`sensitive_text`) in the rendered message;
* :class:`JsonFormatter`, one JSON object per line with the time, level, logger,
  message and the ``request_id`` of the current context, which scrubs the same
  fields again and renders tracebacks with every message as a digest
  (:func:`redacted_traceback`), so a handler that forgot the filter still leaks nothing.

Pure stdlib: no torch, no I/O.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import traceback
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

DIGEST_HEX = 12


def text_sha256(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_HEX]


def describe_text(text: str) -> str:
    """``"sha256:3f2a0c9d81be (42 chars)"``: all a log line may say about a text."""
    return f"sha256:{text_sha256(text)} ({len(text)} chars)"


def describe_exception(exc: BaseException) -> str:
    """``"ValueError: sha256:... (17 chars)"``: the type, and the message only as a digest.

    Why: messages are built from whatever the failing code held, user text included
    (``f"cannot read {text!r}"``); the type and the stack say where it failed.
    """
    return f"{type(exc).__qualname__}: {describe_text(str(exc))}"


def redacted_traceback(exc: BaseException) -> str:
    """A traceback like ``traceback.format_exception``, with every message (chained ones too) as a digest.

    The frames (file, line, function, source line) are kept: source code is not user text.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        block = "".join(traceback.format_tb(current.__traceback__))
        header = "Traceback (most recent call last):\n" if block else ""
        parts.append(f"{header}{block}{describe_exception(current)}")
        if current.__cause__ is not None:
            current, link = current.__cause__, "The above exception was the direct cause of the following exception:"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "During handling of the above exception, another exception occurred:"
        else:
            break
        parts.append(f"\n{link}\n\n")
    return "".join(reversed(parts))


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
