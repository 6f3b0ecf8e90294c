"""A text stream that may hold whole SSML documents: runs of plain pieces, split at each document.

The WebSocket takes text in pieces (an LLM's tokens) and, beside them, whole SSML documents
(one message each). Plain pieces are cut into sentences as they arrive; a document goes
through the one segmenter as an HTTP input does. :class:`PlainRuns` yields the plain pieces
of one run and stops at the next document, which :meth:`PlainRuns.take_markup` then hands over.
No FastAPI here.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Literal

InputFormat = Literal["text", "ssml"]


class PlainRuns:
    """The pieces of a stream as runs of plain text, each run ended by an SSML document or the stream's end."""

    def __init__(self, pieces: AsyncIterable[str], is_markup: Callable[[str], bool]) -> None:
        self._pieces = aiter(pieces)
        self._is_markup = is_markup
        self._markup: str | None = None
        self.is_exhausted = False

    async def plain(self) -> AsyncIterator[str]:
        """The plain pieces up to the next SSML document (kept for :meth:`take_markup`) or the stream's end."""
        while not self.is_exhausted and self._markup is None:
            try:
                piece = await anext(self._pieces)
            except StopAsyncIteration:
                self.is_exhausted = True
                return
            if self._is_markup(piece):
                self._markup = piece
                return
            yield piece

    def take_markup(self) -> str | None:
        """The SSML document that ended the last run, once; None when the stream ended instead."""
        markup, self._markup = self._markup, None
        return markup
