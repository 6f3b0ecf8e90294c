"""Capacity of this machine under several server configurations, in one run (JSON per config + combined + PNG).

Usage::

    python scripts/capacity_bench.py [--out-dir docs/benchmarks/capacity] [--dummy-size full|tiny]
        [--configs deadline:off,deadline:realtime,fifo:off,fifo:realtime] [--max-concurrency 32]
        [--level-duration-s 30] [--prebuffer-ms 1000] [--max-new-tokens 250]

For each configuration ``SCHEDULING:ADMISSION`` (``-`` as the scheduling: the server's default,
no ``--scheduling`` flag), one after another: a ``turbotts serve`` on a free loopback port
(``--load-format dummy --dummy-size full --dtype auto --quant auto --vocoder-dtype auto`` by
default, rate limits off), wait for ``/readyz``, two warm-up requests, then the
``turbotts loadtest --find-capacity`` search (:func:`turbotts.bench.loadtest_capacity.find_capacity`,
in this process) and the server is stopped. Writes ``capacity_<config>.json`` for each,
``capacity.json`` with all of them and ``capacity.png`` comparing them.

Why serially and on one machine: the configurations are compared on the same CPU, with nothing
else of ours running beside them. Heavy with full-size weights: run it under ``nice`` on a
shared box. ``--dummy-size tiny --level-duration-s 1 --max-concurrency 3`` is a quick check.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import httpx

from turbotts.bench.figures import new_figure, save_figure
from turbotts.bench.loadtest_capacity import (
    CapacityCriteria,
    CapacityPlan,
    capacity_report,
    find_capacity,
    print_capacity_table,
    progress_columns,
)
from turbotts.bench.loadtest_client import LoadOptions, speech_url
from turbotts.bench.loadtest_corpus import BUILTIN_TEXTS
from turbotts.bench.local_server import local_server
from turbotts.bench.report import write_json

DEFAULT_CONFIGS = "deadline:off,deadline:realtime,fifo:off,fifo:realtime"


def _parse_configs(spec: str) -> list[tuple[str, str]]:
    configs = []
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        scheduling, _, admission = item.partition(":")
        if admission not in ("off", "realtime") or not scheduling:
            raise SystemExit(
                f"error: --configs takes SCHEDULING:ADMISSION items (admission off|realtime), got {item!r}"
            )
        configs.append((scheduling, admission))
    if not configs:
        raise SystemExit("error: --configs is empty")
    return configs


def _serve_flags(args: argparse.Namespace, scheduling: str, admission: str) -> list[str]:
    flags = ["--load-format", "dummy", "--dummy-size", args.dummy_size, "--dtype", args.dtype, "--quant", args.quant,
             "--vocoder-dtype", args.vocoder_dtype, "--admission", admission, "--log-format", "text"]  # fmt: skip
    return flags if scheduling == "-" else [*flags, "--scheduling", scheduling]


def _warm_up(url: str, max_new_tokens: int) -> None:
    """Two requests, so one-time costs (first allocations, caches of compiled kernels) stay out of level 1."""
    for text in BUILTIN_TEXTS[:2]:
        body = {"input": text, "response_format": "pcm", "max_new_tokens": max_new_tokens}
        httpx.post(speech_url(url), json=body, timeout=600).raise_for_status()


def _label(scheduling: str, admission: str) -> str:
    return f"{'default' if scheduling == '-' else scheduling}, admission {admission}"


def _run_config(args: argparse.Namespace, scheduling: str, admission: str, progress: Any, tmp: Path) -> dict[str, Any]:
    name = f"{'default' if scheduling == '-' else scheduling}-{admission}"
    criteria = CapacityCriteria(args.min_continuity, args.max_ttfa_p95_s)
    plan = CapacityPlan(tuple(BUILTIN_TEXTS), criteria, args.max_concurrency, args.level_duration_s,
                        args.min_requests_per_listener)  # fmt: skip
    body: dict[str, Any] = {"max_new_tokens": args.max_new_tokens}
    if args.send_buffer:
        body["playback_buffer_s"] = args.prebuffer_ms / 1000
    log_path = tmp / f"serve-{name}.log"
    env = {"TURBOTTS_VOICES_DB": str(log_path.with_suffix(".sqlite3")), "TURBOTTS_RATE_LIMIT_RPS": "0",
           "TURBOTTS_CACHE_MAX_BYTES": "0"}  # fmt: skip
    with local_server(_serve_flags(args, scheduling, admission), log_path, env=env) as server:
        url = server.url
        _warm_up(url, args.max_new_tokens)
        options = LoadOptions(url=speech_url(url), body=body, prebuffer_s=args.prebuffer_ms / 1000)
        search = find_capacity(options, plan, progress)
    config = {"url": options.url, "body": body, "prebuffer_ms": args.prebuffer_ms, "scheduling": scheduling,
              "admission": admission, "dummy_size": args.dummy_size, "dtype": args.dtype, "quant": args.quant,
              "vocoder_dtype": args.vocoder_dtype, "texts": "builtin"}  # fmt: skip
    report = capacity_report(search, plan, config, _label(scheduling, admission))
    write_json(report, args.out_dir / f"capacity_{name}.json")
    return report


def _comparison_plot(reports: list[dict[str, Any]], path: Path) -> None:
    """Capacity (listeners kept gap-free) by configuration; continuity, stall seconds and TTFA p95 by level."""
    fig, (ax_capacity, ax_continuity, ax_stall, ax_ttfa) = new_figure(4, (18, 4.4))
    labels = [r["label"] for r in reports]
    ax_capacity.bar(range(len(reports)), [r["capacity"] for r in reports], color="tab:green")
    ax_capacity.set_xticks(range(len(reports)), labels, rotation=20, ha="right", fontsize=8)
    ax_capacity.set(ylabel="concurrent listeners", title="Capacity (listeners kept gap-free)")
    for report in reports:
        xs = [lv["concurrency"] for lv in report["levels"]]
        label = f"{report['label']} (capacity {report['capacity']})"
        nan = float("nan")
        ax_continuity.plot(xs, [nan if lv["continuity_rate"] is None else lv["continuity_rate"]
                                for lv in report["levels"]], marker="o", label=label)  # fmt: skip
        ax_stall.plot(xs, [lv["stall_s"]["total"] for lv in report["levels"]], marker="o", label=label)
        ax_ttfa.plot(xs, [nan if lv["ttfa_p95_s"] is None else lv["ttfa_p95_s"] for lv in report["levels"]],
                     marker="o", label=label)  # fmt: skip
    criteria = reports[0]["criteria"]
    ax_continuity.axhline(criteria["min_continuity"], color="gray", linestyle=":")
    ax_continuity.set(xlabel="concurrent listeners", ylabel="share of streams", ylim=(-0.05, 1.05),
                      title="Continuity")  # fmt: skip
    ax_stall.set(xlabel="concurrent listeners", ylabel="seconds (all streams)", title="Stall seconds")
    ax_ttfa.axhline(criteria["max_ttfa_p95_s"], color="gray", linestyle=":")
    ax_ttfa.set(xlabel="concurrent listeners", ylabel="seconds", title="TTFA p95")
    for ax in (ax_capacity, ax_continuity, ax_stall, ax_ttfa):
        ax.grid(alpha=0.3)
    for ax in (ax_continuity, ax_stall, ax_ttfa):
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax_ttfa.legend(fontsize=7)
    machine = reports[0]["machine"]
    save_figure(fig, path, f"TurboTTS capacity by configuration ({machine['cpu_model_name']}, "
                           f"{machine['cpu_count']} CPUs)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path("docs/benchmarks/capacity"))
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="SCHEDULING:ADMISSION items, comma-separated")
    parser.add_argument("--dummy-size", choices=("tiny", "full"), default="full")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quant", default="auto")
    parser.add_argument("--vocoder-dtype", default="auto")
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--level-duration-s", type=float, default=30.0)
    parser.add_argument("--min-requests-per-listener", type=int, default=3)
    parser.add_argument("--prebuffer-ms", type=float, default=1000.0, help="the listener's buffer")
    parser.add_argument("--send-buffer", action=argparse.BooleanOptionalAction, default=True,
                        help="send it as playback_buffer_s")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=int, default=250, help="code frames per request (dummy weights)")
    parser.add_argument("--min-continuity", type=float, default=0.99)
    parser.add_argument("--max-ttfa-p95-s", type=float, default=1.0)
    args = parser.parse_args()
    configs = _parse_configs(args.configs)
    from rich.console import Console
    from rich.progress import Progress

    reports = []
    with tempfile.TemporaryDirectory(prefix="capacity-bench-") as tmp, Progress(
        *progress_columns(), console=Console(stderr=True)
    ) as progress:  # fmt: skip
        overall = progress.add_task("configurations", total=len(configs), note="")
        for scheduling, admission in configs:
            progress.update(overall, note=_label(scheduling, admission))
            reports.append(_run_config(args, scheduling, admission, progress, Path(tmp)))
            progress.update(overall, advance=1)
    write_json({"configs": reports}, args.out_dir / "capacity.json")
    _comparison_plot(reports, args.out_dir / "capacity.png")
    for report in reports:
        print_capacity_table(report)
    print(f"wrote {args.out_dir}/capacity.json, capacity.png and one capacity_<config>.json per configuration")


if __name__ == "__main__":
    main()
