"""Single flight: identical concurrent requests share one synthesis.

When a popular deterministic request misses the cache, a burst of identical
requests would otherwise each occupy a GPU slot to produce the same bytes.
Here the first caller of a key starts the computation in its own task and
every caller, the first included, waits for that task. So:

- one computation per key at a time, its result (or exception) delivered to all;
- a caller that is cancelled (its client went away) only stops waiting: the
  computation goes on for the others, so a cancelled first caller never wedges
  the rest and no work is thrown away;
- when the last waiter is gone the computation is cancelled, so nobody pays
  for audio nobody wants;
- if the computation is cancelled from inside (the engine aborted it), every
  waiter gets :class:`~turbotts.errors.RequestCancelledError` rather than a
  bare ``CancelledError`` that would look like its own cancellation.

Nothing is remembered once a flight ends; the caches do that. Use one instance
per event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from turbotts.errors import RequestCancelledError

T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
    task: asyncio.Future[T]
    num_waiters: int = 0


class SingleFlight(Generic[T]):
    """Deduplicates concurrent calls by key; see the module docstring for the rules."""

    def __init__(self) -> None:
        self._flights: dict[str, _Flight[T]] = {}
        self.num_started = 0  # computations run
        self.num_joined = 0  # calls that shared a computation someone else started

    @property
    def num_in_flight(self) -> int:
        """Keys being computed now."""
        return len(self._flights)

    async def do(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        """The result of ``compute()``, shared with concurrent callers of the same ``key``.

        Args:
            key: identifies the computation (e.g. the cache key).
            compute: starts the work; only called if no flight for ``key`` is running.

        Returns:
            What the shared computation returned.

        Raises:
            Exception: whatever the shared computation raised, in every waiter.
            RequestCancelledError: the computation was cancelled from inside.
            asyncio.CancelledError: this caller was cancelled (the others carry on).
        """
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight(asyncio.ensure_future(compute()))
            self._flights[key] = flight
            flight.task.add_done_callback(lambda _: self._forget(key, flight))
            self.num_started += 1
        else:
            self.num_joined += 1
        flight.num_waiters += 1
        try:
            await asyncio.wait({flight.task})  # unlike awaiting the task, a cancelled waiter leaves it running
        finally:
            flight.num_waiters -= 1
            if flight.num_waiters == 0 and not flight.task.done():
                flight.task.cancel()
                self._forget(key, flight)  # a caller arriving now starts afresh, not on a dying flight
        if flight.task.cancelled():
            raise RequestCancelledError(f"the shared computation for key {key[:16]} was cancelled; retry the request")
        return flight.task.result()

    def _forget(self, key: str, flight: _Flight[T]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.task.done() and not flight.task.cancelled():
            flight.task.exception()  # mark it retrieved: the waiters re-raise it themselves
