"""The request id of the work in progress, for every log line (a contextvar)."""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import IO

from turbotts.guard.redact import JsonFormatter, RedactionFilter

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


def install_log_filter() -> None:
    """Every root handler gets the request id and the redaction filter (request text never reaches a log)."""
    handler_filter = RequestIdFilter()
    redaction = RedactionFilter()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(handler_filter)
        if not any(isinstance(f, RedactionFilter) for f in handler.filters):
            handler.addFilter(redaction)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str = "info", log_format: str = "text", stream: IO[str] | None = None) -> None:
    """Root handlers print the request id of every line (``-`` outside a request).

    ``json``: one redacted JSON object per line (:class:`turbotts.guard.redact.JsonFormatter`),
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
        handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(LOG_FORMAT))
