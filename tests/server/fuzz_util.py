"""Helpers for the fuzz tests: a module-wide server on loopback and the ERROR log records it writes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def logged_errors() -> Iterator[list[logging.LogRecord]]:
    """ERROR records of the app and of uvicorn (whose loggers do not propagate to the root) while inside.

    An unhandled exception ("Exception in ASGI application") is a bug even when the client got an answer.
    """
    handler = _Collect()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def describe(records: list[logging.LogRecord]) -> str:
    return "; ".join(f"{r.name}: {r.getMessage()} {r.exc_info[1]!r}" if r.exc_info else r.getMessage() for r in records)
