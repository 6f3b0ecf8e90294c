"""``turbotts loadtest URL``: HTTP load against a running server, with TTFA, stalls, goodput (JSON + PNG).

Unlike ``turbotts bench`` (the engine in-process), this measures what a client sees
through the whole stack: HTTP, admission, the caches, the encoder, a proxy or a Ray
Serve endpoint. The work is in :mod:`loadtest_client` (requests), :mod:`loadtest_audio`
(decoding), :mod:`loadtest_player` (stalls) and :mod:`loadtest_report` (numbers, plot).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from turbotts.cli_options import fail
from turbotts.optional import require

if TYPE_CHECKING:
    from rich.progress import TaskID

    from turbotts.bench.loadtest_client import LoadOptions, LoadRequest, RequestRecord

FORMATS = ("pcm", "wav", "mp3", "opus", "aac", "flac")


def _floats(spec: str, name: str, cast: type = float) -> list[Any]:
    try:
        values = [cast(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise fail(f"{name} takes a comma-separated list of numbers, got {spec!r}") from None
    if not values or any(v <= 0 for v in values):
        raise fail(f"{name} takes positive numbers, got {spec!r}")
    return values


def _offered_loads(concurrency: str | None, request_rate: float | None, sweep: str | None) -> list[dict[str, float]]:
    """One dict per run: ``{"concurrency": c}`` or ``{"request_rate": r}``."""
    if sum(x is not None for x in (concurrency, request_rate, sweep)) != 1:
        raise fail("pass exactly one of --concurrency, --request-rate or --sweep")
    if concurrency is not None:
        return [{"concurrency": c} for c in _floats(concurrency, "--concurrency", int)]
    if request_rate is not None:
        if request_rate <= 0:
            raise fail(f"--request-rate must be positive, got {request_rate}")
        return [{"request_rate": request_rate}]
    return [{"request_rate": r} for r in _floats(sweep or "", "--sweep")]


def loadtest(
    url: Annotated[str, typer.Argument(help="Server base URL (the speech path is added) or the full endpoint URL.")],
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Closed-loop clients (comma list: one run each).")
    ] = None,
    request_rate: Annotated[float | None, typer.Option("--request-rate", help="Poisson arrivals per s.")] = None,
    sweep: Annotated[str | None, typer.Option("--sweep", help="Poisson rates, one run each: 0.5,1,2,4.")] = None,
    num_requests: Annotated[int, typer.Option("--num-requests", min=1, help="Requests per run, at most.")] = 50,
    duration_s: Annotated[
        float | None, typer.Option("--duration-s", help="No request starts after this many seconds of a run.")
    ] = None,
    texts: Annotated[Path | None, typer.Option("--texts", help="One text per line (default: built-in zh/en).")] = None,
    response_format: Annotated[str, typer.Option("--format", help="Response formats, in turn (comma list).")] = "pcm",
    stream_format: Annotated[str, typer.Option("--stream-format", help="audio or sse.")] = "audio",
    is_seeded: Annotated[
        bool, typer.Option("--seeded/--unseeded", help="Seeded requests repeat and hit the cache; unseeded bypass it.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Arrival times, and the base of request seeds.")] = 0,
    model: Annotated[str, typer.Option("--model")] = "tts-1",
    voice: Annotated[str, typer.Option("--voice")] = "alloy",
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", min=1, help="Sent with each request.")
    ] = None,
    prebuffer_ms: Annotated[
        float | None,
        typer.Option(
            "--prebuffer-ms", help="Audio the player buffers before it starts [default: 0; 1000 with --find-capacity]."
        ),
    ] = None,
    send_buffer: Annotated[
        bool | None,
        typer.Option(
            "--send-buffer/--no-send-buffer",
            help="Send the buffer as playback_buffer_s in each request "
            "[default: with --find-capacity]; --no-send-buffer for servers without the field.",
        ),
    ] = None,
    slo_ttfa_s: Annotated[float, typer.Option("--slo-ttfa-s", help="TTFA objective for goodput.")] = 1.0,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Per request.")] = 120.0,
    api_key_env: Annotated[
        str | None, typer.Option("--api-key-env", help="Environment variable holding the API key (Bearer).")
    ] = None,
    json_path: Annotated[Path, typer.Option("--json", help="Where to write the report.")] = Path("loadtest.json"),
    plot_path: Annotated[Path | None, typer.Option("--plot", help="PNG: latency and continuity vs load.")] = None,
    find_capacity: Annotated[
        bool,
        typer.Option(
            "--find-capacity",
            help="Add closed-loop listeners one level at a time until a level "
            "fails the criteria; report the highest passing level.",
        ),
    ] = False,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", help="--find-capacity: the last level.")] = 32,
    level_duration_s: Annotated[
        float, typer.Option("--level-duration-s", help="--find-capacity: no request starts after this, per level.")
    ] = 30.0,
    min_requests_per_listener: Annotated[
        int, typer.Option("--min-requests-per-listener", help="--find-capacity: each listener sends at least this.")
    ] = 3,
    min_continuity: Annotated[
        float, typer.Option("--min-continuity", help="--find-capacity: a level passes with at least this continuity.")
    ] = 0.99,
    max_ttfa_p95_s: Annotated[
        float, typer.Option("--max-ttfa-p95-s", help="--find-capacity: ... and a TTFA p95 of at most this.")
    ] = 1.0,
    label: Annotated[str | None, typer.Option("--label", help="--find-capacity: a name kept in the JSON.")] = None,
) -> None:
    """Load a running server over HTTP: TTFA, latency, stalls, continuity and goodput (JSON + optional PNG)."""
    require("httpx", "av", purpose="turbotts loadtest")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would bury the progress bar
    if plot_path is not None:
        require("matplotlib", purpose="--plot")
    from turbotts.bench.loadtest_client import LoadOptions, speech_url
    from turbotts.bench.loadtest_corpus import BUILTIN_TEXTS, load_texts

    if find_capacity and (concurrency, request_rate, sweep) != (None, None, None):
        raise fail("--find-capacity chooses its own levels: drop --concurrency, --request-rate and --sweep")
    loads = [] if find_capacity else _offered_loads(concurrency, request_rate, sweep)
    prebuffer_ms = (1000.0 if find_capacity else 0.0) if prebuffer_ms is None else prebuffer_ms
    formats = [f.strip() for f in response_format.split(",") if f.strip()]
    if not formats or any(f not in FORMATS for f in formats):
        raise fail(f"--format takes formats among {', '.join(FORMATS)}, got {response_format!r}")
    if stream_format not in ("audio", "sse"):
        raise fail(f"--stream-format must be audio or sse, not {stream_format!r}")
    if not url.startswith(("http://", "https://")):
        raise fail(f"URL must start with http:// or https://, got {url!r}")
    for name, value in (("--prebuffer-ms", prebuffer_ms), ("--duration-s", duration_s)):
        if value is not None and value < 0:
            raise fail(f"{name} must be >= 0, got {value}")
    if slo_ttfa_s <= 0 or timeout_s <= 0:
        raise fail("--slo-ttfa-s and --timeout-s must be positive")
    headers = {}
    if api_key_env is not None:
        if not os.environ.get(api_key_env):
            raise fail(f"--api-key-env {api_key_env}: that environment variable is not set")
        headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
    try:
        corpus = load_texts(texts) if texts is not None else BUILTIN_TEXTS
    except ValueError as exc:
        raise fail(str(exc)) from None
    body: dict[str, Any] = {"model": model, "voice": voice}
    if max_new_tokens is not None:
        body["max_new_tokens"] = max_new_tokens
    if send_buffer if send_buffer is not None else find_capacity:
        body["playback_buffer_s"] = prebuffer_ms / 1000
    options = LoadOptions(
        url=speech_url(url), body=body, headers=headers, prebuffer_s=prebuffer_ms / 1000, timeout_s=timeout_s
    )
    if find_capacity:
        from turbotts.bench.loadtest_capacity import CapacityCriteria, CapacityPlan, run_capacity_command

        try:
            capacity_plan = CapacityPlan(
                tuple(corpus), CapacityCriteria(min_continuity, max_ttfa_p95_s), max_concurrency, level_duration_s,
                min_requests_per_listener, tuple(formats), stream_format, is_seeded, seed,
            )  # fmt: skip
        except ValueError as exc:
            raise fail(str(exc)) from None
        config = {"url": options.url, "body": body, "prebuffer_ms": prebuffer_ms, "timeout_s": timeout_s,
                  "texts": str(texts) if texts else "builtin"}  # fmt: skip
        run_capacity_command(options, capacity_plan, config, label, json_path, plot_path)
        return
    plan = LoadPlan(loads, num_requests, duration_s, slo_ttfa_s, corpus, tuple(formats), stream_format, is_seeded, seed)
    runs, rows = _run_all(options, plan)
    config = {**dataclasses.asdict(plan), "texts": str(texts) if texts else "builtin", "num_texts": len(corpus),
              "url": options.url, "model": model, "voice": voice, "max_new_tokens": max_new_tokens,
              "prebuffer_ms": prebuffer_ms, "timeout_s": timeout_s}  # fmt: skip
    from turbotts.bench.loadtest_report import write_plot
    from turbotts.bench.report import write_json

    write_json(_report(runs, rows, config), json_path)
    if plot_path is not None:
        write_plot(runs, rows[0], plot_path, f"TurboTTS loadtest ({options.url})")
    _print_summary(runs)


@dataclass(frozen=True)
class LoadPlan:
    """What to send in each run (one run per offered load)."""

    loads: list[dict[str, float]]
    num_requests: int
    duration_s: float | None
    slo_ttfa_s: float
    texts: tuple[str, ...]
    formats: tuple[str, ...]
    stream_format: str
    is_seeded: bool
    seed: int

    def requests_for(self, load: dict[str, float]) -> list[LoadRequest]:
        from turbotts.bench.loadtest_client import make_requests

        return make_requests(self.num_requests, self.texts, self.formats, self.stream_format,
                             load.get("request_rate"), is_seeded=self.is_seeded, seed=self.seed)  # fmt: skip


def _run_all(options: LoadOptions, plan: LoadPlan) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """One run per offered load, each with a rich progress bar; returns summaries and per-request rows."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turbotts.bench.loadtest_client import run_load
    from turbotts.bench.loadtest_report import offered_label, request_rows, summarize_run

    runs, rows = [], []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[errors]} errors"))  # fmt: skip
    with Progress(*columns, console=Console(stderr=True)) as bar:
        for load in plan.loads:
            requests = plan.requests_for(load)
            name, value = offered_label(load)
            task = bar.add_task(f"{name.split('(')[1].rstrip(')')} {value:g}", total=len(requests), errors=0)
            num_errors = [0]

            def advance(record: RequestRecord, task: TaskID = task, num_errors: list[int] = num_errors) -> None:
                num_errors[0] += not record.is_ok
                bar.update(task, advance=1, errors=num_errors[0])

            concurrency = int(load["concurrency"]) if "concurrency" in load else None
            result = asyncio.run(
                run_load(options, requests, concurrency=concurrency, duration_s=plan.duration_s, on_done=advance)
            )
            bar.update(task, total=len(result.records))
            runs.append(summarize_run(result, load, plan.slo_ttfa_s))
            rows.append(request_rows(result))
    return runs, rows


def _report(runs: list[dict[str, Any]], rows: list[list[dict[str, Any]]], config: dict[str, Any]) -> dict[str, Any]:
    """The first run's numbers at the top level (as ``turbotts bench`` does), every run under ``runs``."""
    with_rows = [{**run, "requests": run_rows} for run, run_rows in zip(runs, rows, strict=True)]
    return {**runs[0], "runs": with_rows, "config": config}


def _print_summary(runs: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from turbotts.bench.loadtest_report import offered_label

    table = Table(title="TurboTTS loadtest")
    for column in ("load", "ok", "TTFA p50", "TTFA p99", "lat p99", "audio/s", "contin", "goodput", "stall",
                   "statuses"):  # fmt: skip
        table.add_column(column)
    for r in runs:
        continuity = r["continuity_rate"]
        table.add_row(
            f"{offered_label(r['offered_load'])[1]:g}",
            f"{r['num_ok']}/{r['num_requests']}",
            _seconds(r["ttfa_s"]["p50"]),
            _seconds(r["ttfa_s"]["p99"]),
            _seconds(r["latency_s"]["p99"]),
            f"{r['throughput_audio_s_per_s']:.2f}",
            "-" if continuity is None else f"{continuity:.0%}",
            f"{r['goodput_rps']:.2f}",
            _seconds(r["stall_s"]["max"]),
            " ".join(f"{k}:{v}" for k, v in r["status_counts"].items()),
        )
    Console(stderr=True).print(table)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
