"""The asyncio front end: concurrent callers, errors before output, disconnects, shutdown."""

from __future__ import annotations

import asyncio
from functools import cache

import numpy as np
import pytest

from tests.golden import FIXTURE_DIR
from turbotts import EngineConfig, InvalidInputError, QueueFullError, SamplingParams, SynthesisParams
from turbotts.engine.async_engine import AsyncEngine
from turbotts.engine.core import EngineCore
from turbotts.model.chattts import ChatTTSModel
from turbotts.sources import ModelSource, load_model


@cache
def model() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR))


def params(seed: int, frames: int = 16) -> SynthesisParams:
    return SynthesisParams(code=SamplingParams(max_new_tokens=frames, ignore_eos=True), refine_text=False, seed=seed)


async def collect(engine: AsyncEngine, text: str, p: SynthesisParams) -> np.ndarray:
    chunks = [out.audio async for out in engine.generate(text, p)]
    return np.concatenate(chunks)


def test_concurrent_callers_each_get_their_own_complete_audio() -> None:
    async def main() -> list[np.ndarray]:
        engine = AsyncEngine(EngineCore(model(), EngineConfig(max_batch_size=8)))
        try:
            return await asyncio.gather(*(collect(engine, "hello world", params(i, 10 + i)) for i in range(6)))
        finally:
            await engine.shutdown(grace_s=1.0)

    wavs = asyncio.run(main())
    assert [len(w) for w in wavs] == [512 * (10 + i) - 256 for i in range(6)]


def test_bad_input_raises_before_any_output() -> None:
    async def main() -> None:
        engine = AsyncEngine(EngineCore(model(), EngineConfig()))
        try:
            with pytest.raises(InvalidInputError, match="empty"):
                async for _ in engine.generate("!!!", params(1)):
                    pass
            assert engine.stats.num_unfinished == 0
        finally:
            await engine.shutdown(grace_s=1.0)

    asyncio.run(main())


def test_closing_the_iterator_aborts_and_frees_the_slot() -> None:
    """Aborted means fewer frames made than asked, whatever the machine's speed (steps bound the frames)."""
    num_frames_asked = 400

    async def main() -> tuple[int, int]:
        engine = AsyncEngine(EngineCore(model(), EngineConfig(max_batch_size=2)))
        try:
            stream = engine.generate("hello world", params(1, frames=num_frames_asked), stream=True)
            first = await stream.__anext__()
            assert len(first.audio) > 0
            await stream.aclose()  # what a disconnected HTTP client causes
            deadline = asyncio.get_running_loop().time() + 60
            while engine.stats.num_unfinished or engine.stats.num_free_slots != 2:
                assert asyncio.get_running_loop().time() < deadline, "the request was never aborted"
                await asyncio.sleep(0.01)
            steps_at_abort = engine.stats.num_steps
            await asyncio.sleep(0.2)
            return steps_at_abort, engine.stats.num_steps
        finally:
            await engine.shutdown(grace_s=1.0)

    steps_at_abort, steps_later = asyncio.run(main())
    assert steps_at_abort < num_frames_asked // 2  # one frame per step at batch 1: far fewer frames than asked
    assert steps_later == steps_at_abort  # and nothing decoded after the abort


def test_shutdown_finishes_in_flight_work_and_refuses_new_work() -> None:
    async def main() -> None:
        engine = AsyncEngine(EngineCore(model(), EngineConfig()))
        task = asyncio.create_task(collect(engine, "hello", params(2, 20)))
        await asyncio.sleep(0.05)
        await engine.shutdown(grace_s=30.0)
        wav = await task
        assert len(wav) == 512 * 20 - 256
        with pytest.raises(QueueFullError, match="shutting down"):
            async for _ in engine.generate("hello", params(3)):
                pass
        assert not engine.is_alive

    asyncio.run(main())
