"""Response helpers shared by the routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


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
