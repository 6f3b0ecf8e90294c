"""Continuous batching on the tiny model: batch invariance, streaming, cancellation, budgets."""

from __future__ import annotations

import subprocess
import sys
from functools import cache

import numpy as np
import pytest
import torch

from tests.golden import FIXTURE_DIR
from turbotts import EngineConfig, EngineError, QueueFullError, SamplingParams, StreamingConfig, SynthesisParams
from turbotts.engine.core import EngineCore
from turbotts.engine.request import RequestOutput
from turbotts.model.chattts import ChatTTSModel
from turbotts.sources import ModelSource, load_model

TEXTS = [
    "你好，欢迎使用语音合成。",
    "hello world, this is a test.",
    "测试一下",
    "今天天气怎么样",
    "hello",
    "this is a test",
    "欢迎使用",
    "world",
    "语音合成",
]


@cache
def model() -> ChatTTSModel:
    return load_model(ModelSource(checkpoint=FIXTURE_DIR))


def run_all(core: EngineCore) -> dict[str, list[RequestOutput]]:
    outputs: dict[str, list[RequestOutput]] = {}
    while core.has_work():
        for out in core.step():
            outputs.setdefault(out.request_id, []).append(out)
    return outputs


def sampled(seed: int, max_new: int = 30) -> SynthesisParams:
    code = SamplingParams(temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.05, max_new_tokens=max_new)
    return SynthesisParams(code=code, refine_text=False, seed=seed)


def test_a_request_gives_the_same_codes_alone_and_in_a_batch_of_nine() -> None:
    alone = EngineCore(model(), EngineConfig(max_batch_size=1))
    alone.add_request("target", TEXTS[0], sampled(1234))
    outputs_alone = run_all(alone)["target"]
    codes_alone = outputs_alone[-1].codes

    batch = EngineCore(model(), EngineConfig(max_batch_size=16))
    batch.add_request("other-0", TEXTS[1], sampled(1))
    batch.step()  # the target joins a batch that is already running
    batch.add_request("target", TEXTS[0], sampled(1234))
    for i, text in enumerate(TEXTS[2:], start=1):
        batch.add_request(f"other-{i}", text, sampled(i + 1, max_new=10 + 3 * i))
    outputs = run_all(batch)
    assert outputs["target"][-1].codes == codes_alone  # the codes: exactly equal
    assert codes_alone and len(codes_alone[0]) == 4
    assert len({str(outputs[f"other-{i}"][-1].codes) for i in range(8)}) > 1  # others really differ
    # the audio: equal to float rounding (batched matmuls sum in another order), far below one 16-bit step (3e-5)
    audio_alone = np.concatenate([out.audio for out in outputs_alone])
    audio_batched = np.concatenate([out.audio for out in outputs["target"]])
    assert audio_batched.shape == audio_alone.shape and np.abs(audio_alone).max() > 0.01
    np.testing.assert_allclose(audio_batched, audio_alone, rtol=0, atol=1e-5)


def test_different_seeds_give_different_codes() -> None:
    core = EngineCore(model(), EngineConfig())
    core.add_request("a", TEXTS[0], sampled(1))
    core.add_request("b", TEXTS[0], sampled(2))
    outputs = run_all(core)
    assert outputs["a"][-1].codes != outputs["b"][-1].codes


def test_a_request_in_a_reused_slot_samples_with_its_own_parameters() -> None:
    """The runner keeps a steady batch's sampling parameters between steps: a new request in the
    same slot (the same batch shape) must still get its own seed, temperature and top-k."""
    alone = EngineCore(model(), EngineConfig(max_batch_size=1))
    alone.add_request("b", TEXTS[1], sampled(1234))
    codes_alone = run_all(alone)["b"][-1].codes

    reused = EngineCore(model(), EngineConfig(max_batch_size=1))
    greedy = SamplingParams(temperature=0.1, top_k=1, max_new_tokens=30)
    reused.add_request("a", TEXTS[1], SynthesisParams(code=greedy, refine_text=False, seed=1))
    reused.add_request("b", TEXTS[1], sampled(1234))  # waits for "a", then takes its slot
    outputs = run_all(reused)
    assert outputs["b"][-1].codes == codes_alone
    assert outputs["a"][-1].codes != codes_alone


@pytest.mark.parametrize(("left", "lookahead", "tolerance"), [(8, 8, 5e-3), (24, 24, 1e-5)])
def test_streamed_chunks_concatenate_to_the_one_shot_decode(left: int, lookahead: int, tolerance: float) -> None:
    streaming = StreamingConfig(
        first_chunk_frames=4,
        chunk_frames=8,
        max_chunk_frames=8,
        left_context_frames=left,
        lookahead_frames=lookahead,
        first_chunk_lookahead_frames=lookahead,
    )
    params = SynthesisParams(code=SamplingParams(max_new_tokens=70, ignore_eos=True), refine_text=False, seed=5)
    streamed_core = EngineCore(model(), EngineConfig(streaming=streaming))
    streamed_core.add_request("s", TEXTS[1], params, stream=True)
    chunks = run_all(streamed_core)["s"]
    one_shot_core = EngineCore(model(), EngineConfig())
    one_shot_core.add_request("o", TEXTS[1], params, stream=False)
    one_shot = run_all(one_shot_core)["o"]
    assert len([c for c in chunks if len(c.audio)]) >= 5
    assert len(one_shot) == 1
    joined = np.concatenate([c.audio for c in chunks])
    assert len(joined) == len(one_shot[0].audio) == 512 * 70 - 256
    assert float(np.abs(joined - one_shot[0].audio).max()) <= tolerance


def test_chunks_grow_from_chunk_frames_to_max_chunk_frames() -> None:
    streaming = StreamingConfig(
        first_chunk_frames=2,
        chunk_frames=4,
        max_chunk_frames=16,
        left_context_frames=4,
        lookahead_frames=2,
        first_chunk_lookahead_frames=2,
    )
    core = EngineCore(model(), EngineConfig(streaming=streaming))
    params = SynthesisParams(code=SamplingParams(max_new_tokens=60, ignore_eos=True), refine_text=False, seed=5)
    core.add_request("s", TEXTS[0], params, stream=True)
    sizes = [len(c.audio) // 512 for c in run_all(core)["s"] if len(c.audio)]
    assert sizes[:5] == [2, 4, 8, 16, 16]


def test_first_chunk_arrives_after_first_chunk_plus_its_own_lookahead_frames() -> None:
    streaming = StreamingConfig(
        first_chunk_frames=4, chunk_frames=8, left_context_frames=8, lookahead_frames=5, first_chunk_lookahead_frames=2
    )
    core = EngineCore(model(), EngineConfig(streaming=streaming))
    params = SynthesisParams(code=SamplingParams(max_new_tokens=40, ignore_eos=True), refine_text=False, seed=5)
    core.add_request("s", TEXTS[0], params, stream=True)
    arrivals: list[tuple[int, int]] = []  # (step, samples) of each chunk
    steps = 0
    while len(arrivals) < 2:
        steps += 1
        arrivals += [(steps, len(out.audio)) for out in core.step() if len(out.audio)]
    assert arrivals[0] == (4 + 2, 4 * 512)  # one prefill step makes frame 0, then one frame per step
    assert arrivals[1] == (4 + 8 + 5, 8 * 512)  # later chunks hold back lookahead_frames


def test_a_first_chunk_with_a_short_lookahead_is_close_and_the_next_chunk_exact() -> None:
    """The short first lookahead only costs accuracy inside the first chunk."""
    streaming = StreamingConfig(
        first_chunk_frames=4,
        chunk_frames=8,
        max_chunk_frames=8,
        left_context_frames=24,
        lookahead_frames=24,
        first_chunk_lookahead_frames=2,
    )
    params = SynthesisParams(code=SamplingParams(max_new_tokens=70, ignore_eos=True), refine_text=False, seed=5)
    streamed_core = EngineCore(model(), EngineConfig(streaming=streaming))
    streamed_core.add_request("s", TEXTS[1], params, stream=True)
    chunks = [c.audio for c in run_all(streamed_core)["s"] if len(c.audio)]
    one_shot_core = EngineCore(model(), EngineConfig())
    one_shot_core.add_request("o", TEXTS[1], params, stream=False)
    one_shot = run_all(one_shot_core)["o"][0].audio
    first = len(chunks[0])
    assert first == 4 * 512
    first_error = float(np.abs(chunks[0] - one_shot[:first]).max())
    rest_error = float(np.abs(np.concatenate(chunks[1:]) - one_shot[first:]).max())
    assert rest_error <= 1e-5 < first_error


def test_cancel_frees_the_slot_at_the_next_step() -> None:
    core = EngineCore(model(), EngineConfig(max_batch_size=2))
    params = SynthesisParams(code=SamplingParams(max_new_tokens=200, ignore_eos=True), refine_text=False, seed=1)
    core.add_request("a", TEXTS[0], params)
    core.add_request("b", TEXTS[1], params)
    core.add_request("c", TEXTS[2], params)
    core.step()
    assert core.scheduler.num_free_slots == 0 and core.scheduler.num_waiting == 1
    assert core.abort("a")
    core.step()  # frees a's slot, admits c into it
    assert core.scheduler.num_running == 2 and core.scheduler.num_waiting == 0
    assert not core.abort("a")


def test_kv_budget_limits_slots_and_extra_requests_wait() -> None:
    gpt = model().modules.gpt
    one_slot = 256 * gpt.kv_bytes_per_token()
    core = EngineCore(model(), EngineConfig(max_batch_size=8, max_seq_len=256, kv_budget_bytes=3 * one_slot + 10))
    assert core.kv_layout.num_slots == 3
    assert core.runner.cache.num_bytes <= 3 * one_slot
    params = SynthesisParams(code=SamplingParams(max_new_tokens=20, ignore_eos=True), refine_text=False, seed=1)
    for i in range(6):
        core.add_request(str(i), TEXTS[i], params)
    core.step()
    assert core.scheduler.num_running == 3 and core.scheduler.num_waiting == 3
    outputs = run_all(core)
    assert sorted(outputs) == [str(i) for i in range(6)]
    assert all(len(o[-1].codes or []) == 20 for o in outputs.values())


def test_full_queue_is_a_typed_rejection() -> None:
    core = EngineCore(model(), EngineConfig(max_batch_size=1, max_waiting=2))
    params = sampled(1)
    core.add_request("a", TEXTS[0], params)
    core.add_request("b", TEXTS[0], params)
    with pytest.raises(QueueFullError, match="retry"):
        core.add_request("c", TEXTS[0], params)


def test_generation_stops_at_the_end_of_the_kv_slot() -> None:
    core = EngineCore(model(), EngineConfig(max_seq_len=40))
    params = SynthesisParams(code=SamplingParams(max_new_tokens=500, ignore_eos=True), refine_text=False, seed=1)
    core.add_request("a", TEXTS[0], params)  # 16 prompt tokens
    final = run_all(core)["a"][-1]
    assert final.finish_reason == "length" and len(final.codes or []) == 40 - 16


def test_refine_then_codes_run_batched_with_other_requests() -> None:
    core = EngineCore(model(), EngineConfig())
    refine = SamplingParams(temperature=0.7, max_new_tokens=10, repetition_penalty=1.0)
    with_refine = SynthesisParams(code=SamplingParams(max_new_tokens=12), refine=refine, refine_text=True, seed=3)
    core.add_request("r1", TEXTS[0], with_refine)
    core.add_request("r2", TEXTS[1], with_refine)
    core.add_request("plain", TEXTS[2], sampled(4, max_new=12))
    core.step()
    assert core.last_step is not None and core.last_step.num_prefill == 3
    outputs = run_all(core)
    for request_id in ("r1", "r2"):
        final = outputs[request_id][-1]
        assert final.refined_text is not None and final.is_finished


def test_scheduler_and_allocator_import_without_torch() -> None:
    code = (
        "import sys; import turbotts.engine.scheduler, turbotts.engine.kv, turbotts.engine.batch; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_static_bucketed_decode_equals_eager_decode() -> None:
    """The CUDA-graph path minus the capture: padded buckets, static buffers, scratch slot, masked attention."""
    results = {}
    for mode in ("eager", "static"):
        core = EngineCore(model(), EngineConfig(decode_mode=mode, max_batch_size=6))
        for i, text in enumerate(TEXTS[:5]):  # 5 rows run in the 6-row bucket, then fewer as they finish
            core.add_request(str(i), text, sampled(i, max_new=8 + 4 * i))
        results[mode] = {k: v[-1].codes for k, v in run_all(core).items()}
    assert results["eager"] == results["static"]
    static_core = EngineCore(model(), EngineConfig(decode_mode="static", max_batch_size=6))
    decoder = static_core.runner.static_decoder
    assert decoder is not None and decoder.bucket_sizes == [1, 2, 4, 6]
    assert static_core.runner.cache.num_slots == static_core.kv_layout.num_slots + 1  # the scratch slot
    budget_slots = 4
    slot_bytes = 256 * model().modules.gpt.kv_bytes_per_token()
    tight = EngineCore(
        model(), EngineConfig(decode_mode="static", max_seq_len=256, kv_budget_bytes=budget_slots * slot_bytes)
    )
    assert tight.runner.cache.num_bytes <= budget_slots * slot_bytes  # the scratch slot is inside the budget


def test_cuda_graph_mode_needs_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: test_cuda_graph_replay_equals_eager_decode runs the graph path")
    with pytest.raises(EngineError, match="CUDA"):
        EngineCore(model(), EngineConfig(decode_mode="graphs"))


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager_decode() -> None:
    """On a GPU: codes from captured-graph replay equal eager decode, bucket by bucket, as rows finish."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (run with `pytest -m gpu` where one is present)")
    gpu_model = load_model(ModelSource(checkpoint=FIXTURE_DIR), device="cuda")
    results = {}
    for mode in ("eager", "graphs"):
        core = EngineCore(gpu_model, EngineConfig(decode_mode=mode, max_batch_size=6))
        for i, text in enumerate(TEXTS[:5]):  # 5 rows replay the 6-row graph, then smaller ones as they finish
            core.add_request(str(i), text, sampled(i, max_new=8 + 4 * i))
        results[mode] = {k: v[-1].codes for k, v in run_all(core).items()}
    assert results["graphs"] == results["eager"]
    graph_core = EngineCore(gpu_model, EngineConfig(decode_mode="graphs", max_batch_size=6))
    decoder = graph_core.runner.static_decoder
    assert decoder is not None and decoder.bucket_sizes == [1, 2, 4, 6]


def test_bf16_vocoder_stays_close_to_fp32() -> None:
    params = SynthesisParams(code=SamplingParams(max_new_tokens=30, ignore_eos=True), refine_text=False, seed=5)
    wavs = {}
    for dtype in ("fp32", "bf16"):
        core = EngineCore(model(), EngineConfig(vocoder_dtype=dtype))
        core.add_request("a", TEXTS[0], params)
        wavs[dtype] = run_all(core)["a"][-1].audio
    assert wavs["bf16"].dtype == np.float32 and len(wavs["bf16"]) == len(wavs["fp32"])
    error = float(np.abs(wavs["bf16"] - wavs["fp32"]).max())
    assert 0 < error < 0.05 * float(np.abs(wavs["fp32"]).max())


def test_a_bf16_kv_cache_holds_twice_the_tokens_in_one_budget_and_still_speaks() -> None:
    params = SynthesisParams(code=SamplingParams(max_new_tokens=30, ignore_eos=True), refine_text=False, seed=5)
    budget = 2 * 2**20
    cores = {
        dtype: EngineCore(model(), EngineConfig(kv_dtype=dtype, kv_budget_bytes=budget)) for dtype in ("auto", "bf16")
    }
    assert cores["auto"].runner.cache.data.dtype == torch.float32  # fp32 weights, no int8 stack: exact cache
    assert cores["bf16"].runner.cache.data.dtype == torch.bfloat16
    slots = {dtype: core.kv_layout.num_slots * core.kv_layout.max_seq_len for dtype, core in cores.items()}
    assert slots["bf16"] >= 2 * slots["auto"] - cores["auto"].kv_layout.max_seq_len
    wavs = {}
    for dtype, core in cores.items():
        core.add_request("a", TEXTS[0], params)
        wavs[dtype] = run_all(core)["a"][-1].audio
    assert len(wavs["bf16"]) == len(wavs["auto"]) and np.isfinite(wavs["bf16"]).all()
    assert float(np.abs(wavs["bf16"]).max()) > 0


def test_auto_kv_dtype_is_bf16_under_the_int8_stack_and_a_bad_name_is_refused() -> None:
    int8 = load_model(ModelSource(checkpoint=FIXTURE_DIR), quant="int8")
    if int8.modules.gpt.fused_decode is None:
        pytest.skip("the int8 decode stack did not build here (no C++ compiler)")
    core = EngineCore(int8, EngineConfig())
    assert core.runner.cache.data.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        EngineConfig(kv_dtype="fp16")
