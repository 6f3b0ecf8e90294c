"""Response helpers shared by the routes: a streaming response that always closes its source, and
the stream helpers that make errors raise before the status line is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that always closes its body iterator.

    When the client goes away mid-stream the next send fails; closing the
    iterator then runs its ``finally`` blocks at once (not at garbage
    collection), which cancels the segment tasks and aborts the engine requests.
    """

    def __init__(self, content: AsyncIterator[Any], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._source = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self._source, "aclose", None)
            if aclose is not None:
                await aclose()


async def prime(stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """Run ``stream`` up to its first item, so that its errors raise before a response starts.

    Returns an iterator over the same items (the first included).
    """
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        return _chain(None, stream)
    return _chain((first,), stream)


async def _chain(head: tuple[T] | None, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        if head is None:
            return
        yield head[0]
        async for item in rest:
            yield item
    finally:
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()
