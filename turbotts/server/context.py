"""The request id of the work in progress, for every log line (a contextvar)."""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

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
    handler_filter = RequestIdFilter()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(handler_filter)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str = "info") -> None:
    """Root handlers print the request id of every line (``-`` outside a request)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    root.setLevel(level.upper())
    install_log_filter()
    for handler in root.handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
