"""Where a serving box's CPU time goes under load: a py-spy profile of ``turbotts serve``, by engine stage.

Why: the step profile (``turbotts bench-steps``) times the engine alone; under HTTP load the same
steps share two cores with the event loop, the encoders and the load tester. This starts a
server (full-size dummy weights, the serve defaults), puts ``--concurrency`` closed-loop
listeners on it, records the server with py-spy (every Python thread, idle included), and sums the
engine thread's samples by stage (GPT decode, prefill, sampling, vocoder, the rest of the step,
idle), and reports how busy the event loop (HTTP, encoding, watermark) was and how many of the
box's cores the server and the load tester used. JSON + PNG.

    python scripts/serving_profile.py --concurrency 3 --out-dir docs/benchmarks/capacity
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from turbotts.bench.local_server import LocalServer, local_server

#: stage -> a frame that marks it (the first match down the stack, most specific first)
STAGES = (
    ("GPT decode", "GPT.decode"),
    ("GPT prefill", "ModelRunner._prefill"),
    ("sampling", "ModelRunner._sample"),
    ("vocoder", "VocoderRunner.decode"),
    ("engine step, other", "EngineCore.step"),
)


def stage_of(stack: list[str]) -> str | None:
    """The engine-thread stage of one sampled stack (py-spy raw: thread first, then frames); None: not the engine."""
    if "turbotts-engine" not in stack[0]:
        return None
    names = [frame.split(" (")[0] for frame in stack[1:]]
    for stage, marker in STAGES:
        if marker in names:
            return stage
    return "idle (waiting for work)"


#: the innermost Python frame of a main thread waiting for events (uvloop polls in C, below ``Runner.run``)
EVENT_LOOP_WAIT_FRAMES = ("Runner.run", "run_until_complete", "select", "BaseEventLoop.run_forever")


def is_event_loop_busy(stack: list[str]) -> bool:
    """A main-thread sample doing work (not waiting for events)."""
    return "MainThread" in stack[0] and stack[-1].split(" (")[0] not in EVENT_LOOP_WAIT_FRAMES


def summarize(raw: Path) -> dict[str, object]:
    """The engine thread's time by stage, and how busy the event loop was, as shares of the profile."""
    engine: Counter[str] = Counter()
    num_main = num_main_busy = 0
    for line in raw.read_text().splitlines():
        text, _, num = line.rpartition(" ")
        stack = text.split(";")
        stage = stage_of(stack)
        if stage is not None:
            engine[stage] += int(num)
        elif "MainThread" in stack[0]:
            num_main += int(num)
            num_main_busy += int(num) * is_event_loop_busy(stack)
    total = sum(engine.values())
    return {
        "engine_thread": {stage: num / total for stage, num in engine.most_common()},
        "event_loop_busy_share": num_main_busy / num_main if num_main else None,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (all its threads) has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _profile_under_load(server: LocalServer, args: argparse.Namespace) -> tuple[Path, dict[str, float | None]]:
    """Listeners on ``server``, py-spy on its process: the raw profile, and the cores server and load tester used."""
    num_requests = str(max(args.concurrency * 8, 8))
    load = subprocess.Popen(
        [sys.executable, "-m", "turbotts", "loadtest", server.url, "--concurrency", str(args.concurrency),
         "--num-requests", num_requests, "--max-new-tokens", str(args.max_new_tokens), "--prebuffer-ms", "1000",
         "--json", str(args.out_dir / "serving_profile_load.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(4.0)  # past the first arrivals
    raw = args.out_dir / "serving_profile.raw.txt"
    pid = server.process.pid
    start_s, server_cpu_s, load_cpu_s = time.monotonic(), cpu_seconds(pid), cpu_seconds(load.pid)
    subprocess.run(
        [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid), "-d", str(int(args.duration_s)),
         "-r", "50", "--threads", "--idle", "--nonblocking", "--format", "raw", "-o", str(raw)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wall_s = time.monotonic() - start_s
    cores_used: dict[str, float | None] = {
        "server": (cpu_seconds(pid) - server_cpu_s) / wall_s,
        "load_tester": (cpu_seconds(load.pid) - load_cpu_s) / wall_s,
        "cores": os.cpu_count(),
    }
    load.wait()
    return raw, cores_used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=25.0, help="seconds of profile")
    parser.add_argument("--max-new-tokens", type=int, default=250)
    parser.add_argument("--out-dir", type=Path, default=Path("serving_profile"))
    args = parser.parse_args()
    if args.concurrency < 1 or args.duration_s <= 0:
        parser.error("--concurrency must be >= 1 and --duration-s positive")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = {"TURBOTTS_RATE_LIMIT_RPS": "0", "TURBOTTS_CACHE_MAX_BYTES": "0"}
    flags = ["--load-format", "dummy", "--dummy-size", "full", "--admission", "off", "--log-format", "text"]
    with (
        tempfile.TemporaryDirectory(prefix="serving-profile-") as tmp,
        local_server(flags, Path(tmp) / "serve.log", env=env) as server,
    ):
        raw, cores_used = _profile_under_load(server, args)
    summary = summarize(raw)
    from turbotts.bench.loadtest_capacity import machine_info

    load_path = args.out_dir / "serving_profile_load.json"
    load_report = json.loads(load_path.read_text())
    load_path.unlink()
    heard = {key: load_report[key] for key in ("continuity_rate", "throughput_audio_s_per_s", "ttfa_s", "stall_s")}
    report = {"concurrency": args.concurrency, "duration_s": args.duration_s, "cores_used": cores_used, **summary,
              "load": heard, "machine": machine_info()}  # fmt: skip
    (args.out_dir / "serving_profile.json").write_text(json.dumps(report, indent=2) + "\n")
    raw.unlink()
    shares = summary["engine_thread"]
    assert isinstance(shares, dict)
    _plot(shares, args.out_dir / "serving_profile.png", args.concurrency)
    for stage, share in shares.items():
        print(f"{share:6.1%}  engine thread: {stage}")
    print(f"event loop busy: {summary['event_loop_busy_share']}; cores used: {cores_used}")


def _plot(shares: dict[str, float], path: Path, concurrency: int) -> None:
    from turbotts.bench.figures import new_figure, save_figure

    figure, axis = new_figure(1, (8.0, 4.0))
    names = list(shares)[::-1]
    axis.barh(names, [100 * shares[n] for n in names])
    axis.set_xlabel("share of the engine thread's time (%)")
    save_figure(figure, path, f"turbotts serve under {concurrency} listeners: the engine thread's time")


if __name__ == "__main__":
    main()
