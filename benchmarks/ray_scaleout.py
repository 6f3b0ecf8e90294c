"""Scale-out figures on one box, one run: proxy overhead, L1 hit rate by router, replicas vs threads.

    python benchmarks/ray_scaleout.py --out docs/benchmarks/ray

Same model everywhere (dummy tiny weights, fp32, ``max_new_tokens`` fixed), the same
client (httpx, asyncio, closed loop), TTFA = request sent -> first body bytes.
1. proxy overhead: TTFA at concurrency 1 and 16, single process vs Ray (1 replica x 2 threads);
2. L1 hit rate: 200 requests over 20 distinct seeded texts, cache-aware router vs Ray's default
   (2 replicas, Redis L2 flushed before each);
3. throughput (audio seconds per second at concurrency 16): 1 replica x 2 threads vs 2 replicas x 1 thread.
Writes ``scaleout.json`` and ``scaleout.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest_redis import RedisServer  # noqa: E402
from tests.ray.conftest import RAY_ENV, free_port, tiny_settings, wait_ready  # noqa: E402

MAX_NEW_TOKENS = 48  # 1 s of audio per request
SAMPLE_RATE_HZ = 24000


async def _one(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    ttfa = None
    size = 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as response:
        async for chunk in response.aiter_bytes():
            if ttfa is None and chunk:
                ttfa = time.perf_counter() - started
            size += len(chunk)
        return {"status": response.status_code, "ttfa_s": ttfa, "bytes": size,
                "cache": response.headers.get("x-cache"), "replica": response.headers.get("x-replica")}  # fmt: skip


async def _load(url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    queue = list(bodies)
    records: list[dict[str, Any]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            records.append(await _one(client, queue.pop(0)))

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    wall_s = time.perf_counter() - started
    ttfas = sorted(r["ttfa_s"] for r in records if r["ttfa_s"] is not None)
    audio_s = sum(r["bytes"] for r in records) / 2 / SAMPLE_RATE_HZ
    return {
        "concurrency": concurrency, "num_requests": len(records),
        "num_ok": sum(r["status"] == 200 for r in records),
        "ttfa_p50_s": statistics.median(ttfas), "ttfa_p90_s": ttfas[int(0.9 * (len(ttfas) - 1))],
        "audio_s_per_s": audio_s / wall_s, "wall_s": wall_s,
        "cache": {level: sum(r["cache"] == level for r in records) for level in ("l1", "l2", "miss")},
        "replicas": sorted({r["replica"] for r in records if r["replica"]}),
    }  # fmt: skip


def _bodies(num: int, *, seeded: bool, num_distinct: int | None = None) -> list[dict[str, Any]]:
    out = []
    for i in range(num):
        index = i % num_distinct if num_distinct else i
        body: dict[str, Any] = {"input": f"Benchmark sentence number {index}, spoken once.", "response_format": "pcm"}
        if seeded:
            body["seed"] = 100 + index
        out.append(body)
    return out


async def _hop_latency(url: str, num: int = 200) -> dict[str, float]:
    """``GET /healthz`` round trips, one at a time: the cost of the path itself, no synthesis."""
    times = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for _ in range(num):
            started = time.perf_counter()
            (await client.get("/healthz")).raise_for_status()
            times.append(time.perf_counter() - started)
    times.sort()
    return {"p50_s": statistics.median(times), "p90_s": times[int(0.9 * (num - 1))]}


def _latency_pair(url: str) -> dict[str, Any]:
    asyncio.run(_load(url, _bodies(4, seeded=False), 2))  # warm-up
    return {"healthz": asyncio.run(_hop_latency(url)),
            "c1": asyncio.run(_load(url, _bodies(20, seeded=False), 1)),
            "c16": asyncio.run(_load(url, _bodies(64, seeded=False), 16))}  # fmt: skip


def single_process(tmp: Path) -> dict[str, Any]:
    """``turbotts serve`` in a subprocess, logging to a file (a pipe nobody reads would stall it)."""
    port = free_port()
    env = {**os.environ, "TURBOTTS_MAX_NEW_TOKENS": str(MAX_NEW_TOKENS), "TURBOTTS_KV_BUDGET_BYTES": str(256 * 2**20),
           "TURBOTTS_LOG_LEVEL": "warning", "TURBOTTS_RATE_LIMIT_RPS": "0", "TURBOTTS_DTYPE": "fp32",
           "TURBOTTS_VOCODER_DTYPE": "fp32", "TURBOTTS_VOICES_DB": str(tmp / "voices.sqlite3")}  # fmt: skip
    command = [sys.executable, "-m", "turbotts", "serve", "--port", str(port), "--log-format", "text",
               "--load-format", "dummy", "--dummy-size", "tiny"]  # fmt: skip
    with open(tmp / "single_process.log", "ab") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        return _latency_pair(url)
    finally:
        process.terminate()
        process.wait(30)


def ray_runs(redis: RedisServer) -> dict[str, Any]:
    for name, value in RAY_ENV.items():
        os.environ.setdefault(name, value)
    Path(RAY_ENV["RAY_TMPDIR"]).mkdir(exist_ok=True)
    import ray
    from ray import serve

    from turbotts.scaleout.launch import APP_NAME, connect, deploy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    common = {"max_new_tokens": MAX_NEW_TOKENS, "kv_budget_bytes": 256 * 2**20, "log_level": "warning"}
    one_by_two = tiny_settings(redis.url, port, replicas=1, replica_num_cpus=2, replica_threads=2, **common)
    connect(one_by_two, num_cpus=2)
    results: dict[str, Any] = {}
    try:
        deploy(one_by_two)
        wait_ready(url, 1)
        results["ray_1x2"] = _latency_pair(url)
        for name, is_cache_aware in (("cache_aware", True), ("default_router", False)):
            settings = tiny_settings(redis.url, port, replica_threads=1, cache_aware_routing=is_cache_aware, **common)
            subprocess.run(["redis-cli", "-p", str(redis.port), "flushall"], check=True, capture_output=True)
            serve.delete(APP_NAME)  # a fresh L1 each time (and the 2-CPU replica must go before two others fit)
            deploy(settings)
            wait_ready(url, 2)
            results[f"l1_{name}"] = asyncio.run(_load(url, _bodies(200, seeded=True, num_distinct=20), 4))
            if is_cache_aware:
                results["ray_2x1"] = {"c16": asyncio.run(_load(url, _bodies(64, seeded=False), 16))}
    finally:
        serve.shutdown()
        ray.shutdown()
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    from turbotts.bench.figures import new_figure, save_figure

    fig, (ax1, ax2, ax3) = new_figure(3, (13, 4))
    names = [("single", results["single_process"]), ("ray 1x2", results["ray_1x2"])]
    for offset, level in ((0, "c1"), (0.4, "c16")):
        ax1.bar([i + offset for i in range(2)], [r[level]["ttfa_p50_s"] * 1000 for _, r in names], 0.4, label=level)
    ax1.set_xticks([0.2, 1.2], [n for n, _ in names])
    ax1.set_ylabel("TTFA p50 (ms)")
    ax1.legend()
    routers = ["cache_aware", "default_router"]
    ax2.bar(routers, [results[f"l1_{r}"]["cache"]["l1"] / results[f"l1_{r}"]["num_requests"] for r in routers])
    ax2.set_ylabel("L1 hit rate (200 req, 20 texts)")
    configs = [("1 proc x2", results["single_process"]["c16"]), ("ray 1x2", results["ray_1x2"]["c16"]),
               ("ray 2x1", results["ray_2x1"]["c16"])]  # fmt: skip
    ax3.bar([n for n, _ in configs], [r["audio_s_per_s"] for _, r in configs])
    ax3.set_ylabel("audio s / s at c=16")
    save_figure(fig, path, "Ray Serve scale-out on one 2-core box (tiny model)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "ray")
    args = parser.parse_args()
    tmp = REPO / ".ray-tmp" / "bench"
    tmp.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"load_avg_at_start": os.getloadavg(), "single_process": single_process(tmp)}
    redis = RedisServer(tmp)
    redis.start()
    try:
        results.update(ray_runs(redis))
    finally:
        redis.stop()
    results["single_process_after_ray"] = single_process(tmp)  # the box is shared: is the order what differs?
    results["load_avg_at_end"] = os.getloadavg()
    from turbotts.cpu.info import cpu_info

    results["machine"] = {**cpu_info().report(), "num_cpus": os.cpu_count()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaleout.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out / "scaleout.png")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
