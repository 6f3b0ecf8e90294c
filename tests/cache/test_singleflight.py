from __future__ import annotations

import asyncio

import pytest

from turbotts.cache.singleflight import SingleFlight
from turbotts.errors import RequestCancelledError


class Work:
    """A computation the test releases by hand, recording how often it ran and how it ended."""

    def __init__(self, result: str = "audio") -> None:
        self.result = result
        self.release = asyncio.Event()
        self.num_calls = 0
        self.was_cancelled = False
        self.error: Exception | None = None

    async def __call__(self) -> str:
        self.num_calls += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.was_cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.result


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_identical_concurrent_keys_share_one_computation() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()
        work = Work()
        callers = [asyncio.create_task(flights.do("k", work)) for _ in range(5)]
        await settle()
        assert flights.num_in_flight == 1
        work.release.set()
        assert await asyncio.gather(*callers) == ["audio"] * 5
        assert work.num_calls == 1 and (flights.num_started, flights.num_joined) == (1, 4)
        assert flights.num_in_flight == 0
        assert await flights.do("k", work) == "audio" and work.num_calls == 2  # a finished flight is forgotten

    asyncio.run(main())


def test_different_keys_run_separately() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()
        a, b = Work("a"), Work("b")
        ta, tb = asyncio.create_task(flights.do("a", a)), asyncio.create_task(flights.do("b", b))
        await settle()
        assert flights.num_in_flight == 2
        b.release.set()
        assert await tb == "b" and not ta.done()
        a.release.set()
        assert await ta == "a"

    asyncio.run(main())


def test_an_exception_reaches_every_waiter() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()
        work = Work()
        work.error = RuntimeError("engine failed")
        callers = [asyncio.create_task(flights.do("k", work)) for _ in range(3)]
        await settle()
        work.release.set()
        results = await asyncio.gather(*callers, return_exceptions=True)
        assert all(isinstance(r, RuntimeError) and str(r) == "engine failed" for r in results)
        assert work.num_calls == 1 and flights.num_in_flight == 0

    asyncio.run(main())


def test_a_cancelled_first_caller_does_not_wedge_the_others() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()
        work = Work()
        leader = asyncio.create_task(flights.do("k", work))
        await settle()
        followers = [asyncio.create_task(flights.do("k", work)) for _ in range(2)]
        await settle()
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert not work.was_cancelled  # the others still want the audio
        work.release.set()
        assert await asyncio.wait_for(asyncio.gather(*followers), timeout=2.0) == ["audio", "audio"]
        assert work.num_calls == 1

    asyncio.run(main())


def test_when_every_caller_leaves_the_computation_is_cancelled() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()
        work = Work()
        callers = [asyncio.create_task(flights.do("k", work)) for _ in range(2)]
        await settle()
        for caller in callers:
            caller.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        await settle()
        assert work.was_cancelled and flights.num_in_flight == 0
        fresh = Work("fresh")
        fresh.release.set()
        assert await flights.do("k", fresh) == "fresh"  # a new caller starts afresh

    asyncio.run(main())


def test_a_computation_cancelled_from_inside_fails_waiters_clearly() -> None:
    async def main() -> None:
        flights: SingleFlight[str] = SingleFlight()

        async def aborted() -> str:
            raise asyncio.CancelledError  # e.g. the engine aborted the request

        callers = [asyncio.create_task(flights.do("k", aborted)) for _ in range(2)]
        results = await asyncio.gather(*callers, return_exceptions=True)
        assert all(isinstance(r, RequestCancelledError) for r in results)
        assert not any(c.cancelled() for c in callers)

    asyncio.run(main())
