"""The request id of the work in progress, for every log line (a contextvar), and the log handlers' filters.

Besides our own records, the root handlers carry uvicorn's and websockets' (``log_config=None``):
their access and handshake lines quote the request path, and a path holds a voice name
(``DELETE /v1/voices/{name}``) or whatever a client typed; at DEBUG websockets prints every
frame, the text a client streams included. :class:`ProtocolRedactionFilter` rewrites those
arguments before any handler formats them.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
import uuid
from collections.abc import Iterable
from contextvars import ContextVar
from typing import IO, Any

from turbotts.redaction import JsonFormatter, RedactionFilter, redacted_traceback, text_sha256

request_id_var: ContextVar[str] = ContextVar("turbotts_request_id", default="-")
REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def new_request_id(client_value: str | None = None) -> str:
    """The client's id when it is short and plain, else a fresh one."""
    if client_value and _CLIENT_ID_RE.match(client_value):
        return client_value
    return f"req_{uuid.uuid4().hex[:20]}"


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` so formats can print ``%(request_id)s``."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


def redact_path(path: str, public_segments: frozenset[str]) -> str:
    """``/v1/voices/alice?x=1`` -> ``/v1/voices/{sha256:2bd806c97f0e}?{sha256:...}``.

    Segments that are fixed words of the app's routes stay; any other segment (a
    voice name, a probe) and the query string become the digest of their decoded
    text, the same digest :func:`turbotts.redaction.text_sha256` gives the name.
    """
    path, has_query, query = path.partition("?")
    segments = [
        seg if not seg or seg in public_segments else f"{{sha256:{text_sha256(urllib.parse.unquote(seg))}}}"
        for seg in path.split("/")
    ]
    redacted = "/".join(segments)
    return f"{redacted}?{{sha256:{text_sha256(urllib.parse.unquote(query))}}}" if has_query else redacted


def route_segments(paths: Iterable[str]) -> frozenset[str]:
    """The fixed words of route templates (``/v1/voices/{name}`` gives ``v1`` and ``voices``)."""
    return frozenset(seg for path in paths for seg in path.split("/") if seg and "{" not in seg)


class ProtocolRedactionFilter(logging.Filter):
    """Hashes request paths and hides WebSocket frame payloads in uvicorn's and websockets' records.

    Only records of those loggers are touched (their arguments are known shapes: a
    path is an argument starting with ``/``, a frame has ``opcode`` and ``data``), so our
    own messages about files keep their paths. Must run before :class:`RedactionFilter`,
    which may render the message.
    """

    _LOGGERS = ("uvicorn", "websockets")

    def __init__(self, public_segments: Iterable[str] = ()) -> None:
        super().__init__()
        self.public_segments = frozenset(public_segments)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_is_protocol_redacted", False):  # a record goes through every root handler
            return True
        if record.name.startswith(self._LOGGERS) and isinstance(record.args, tuple):
            record.args = tuple(self._redact(arg) for arg in record.args)
        record.__dict__["_is_protocol_redacted"] = True
        return True

    def _redact(self, arg: Any) -> Any:
        if isinstance(arg, str) and arg.startswith("/"):
            return redact_path(arg, self.public_segments)
        opcode, data = getattr(arg, "opcode", None), getattr(arg, "data", None)
        if opcode is not None and isinstance(data, (bytes, bytearray, memoryview)):
            return f"{getattr(opcode, 'name', opcode)} [{len(data)} bytes]"
        return arg


class RedactingFormatter(logging.Formatter):
    """The plain-text format, with exception messages as digests (they may quote request text)."""

    def formatException(self, ei: Any) -> str:
        return redacted_traceback(ei[1]) if ei and ei[1] is not None else super().formatException(ei)


def install_log_filter(public_segments: Iterable[str] = ()) -> None:
    """Every root handler gets the request id and the redaction filters (request text never reaches a log).

    Args:
        public_segments: the fixed words of the app's paths, kept in access lines
            (:func:`route_segments`); repeated calls add to them.
    """
    handler_filter = RequestIdFilter()
    redaction = RedactionFilter()
    for handler in logging.getLogger().handlers:
        protocol = next((f for f in handler.filters if isinstance(f, ProtocolRedactionFilter)), None)
        if protocol is None:
            protocol = ProtocolRedactionFilter()
            handler.filters.insert(0, protocol)  # before RedactionFilter renders the message
        protocol.public_segments |= frozenset(public_segments)
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(handler_filter)
        if not any(isinstance(f, RedactionFilter) for f in handler.filters):
            handler.addFilter(redaction)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str = "info", log_format: str = "text", stream: IO[str] | None = None) -> None:
    """Root handlers print the request id of every line (``-`` outside a request).

    ``json``: one redacted JSON object per line (:class:`turbotts.redaction.JsonFormatter`),
    the production format; ``text``: the plain format above. ``stream`` replaces the
    root handlers with one writing there (default: keep them, or stderr).
    """
    root = logging.getLogger()
    if stream is not None:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(logging.StreamHandler(stream))
    if not root.handlers:
        logging.basicConfig()
    root.setLevel(level.upper())
    install_log_filter()
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter() if log_format == "json" else RedactingFormatter(LOG_FORMAT))
