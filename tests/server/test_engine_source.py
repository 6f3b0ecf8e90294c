"""The server's engine source: streamed formats come chunk by chunk, buffered ones (flac) as one exact decode."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.golden import FIXTURE_DIR
from turbotts import EngineConfig, SamplingParams, StreamingConfig, SynthesisParams
from turbotts.engine.async_engine import AsyncEngine
from turbotts.engine.core import EngineCore
from turbotts.server.speech.pipeline import EngineSource
from turbotts.sources import ModelSource, load_model

TEXT = "hello world, this is a test."
PARAMS = SynthesisParams(code=SamplingParams(max_new_tokens=60, ignore_eos=True), refine_text=False, seed=7)
STREAMING = StreamingConfig(first_chunk_frames=4, chunk_frames=8, max_chunk_frames=8)


def test_buffered_work_is_decoded_once_exactly_and_streamed_work_in_chunks() -> None:
    async def main() -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        engine = AsyncEngine(
            EngineCore(load_model(ModelSource(checkpoint=FIXTURE_DIR)), EngineConfig(streaming=STREAMING))
        )
        try:
            streamed: list[np.ndarray] = []
            whole: list[np.ndarray] = []
            assert await EngineSource(engine, PARAMS, is_realtime=True).run(TEXT, "streamed", streamed.append) == 60
            assert await EngineSource(engine, PARAMS, is_realtime=False).run(TEXT, "whole", whole.append) == 60
            one_shot = [out.audio async for out in engine.generate(TEXT, PARAMS, stream=False) if out.audio.size]
            return streamed, whole, one_shot
        finally:
            await engine.shutdown(grace_s=1.0)

    streamed, whole, one_shot = asyncio.run(main())
    assert len(streamed) >= 5  # a listener's format: audio as it is made
    assert len(whole) == 1 == len(one_shot)  # flac: one decode of every frame at the end
    np.testing.assert_array_equal(whole[0], one_shot[0])  # the exact one-shot audio, no chunk joins
    joined = np.concatenate(streamed)
    assert joined.shape == whole[0].shape == (512 * 60 - 256,)
    assert 0 < float(np.abs(joined - whole[0]).max()) < 5e-2  # the streamed joins are close, not exact
