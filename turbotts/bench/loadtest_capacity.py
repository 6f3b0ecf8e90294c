"""``turbotts loadtest URL --find-capacity``: the most concurrent listeners a server keeps gap-free and prompt.

Why a search rather than one number from the engine: what a listener gets depends on the whole
stack (scheduling, admission, HTTP, the encoder), so the capacity is measured the way it is
used. Closed-loop listeners are added one level at a time (1, 2, 3, ...); each level runs for
``level_duration_s`` and at least ``min_requests_per_listener`` requests per listener, then is
judged (:func:`judge_level`, pure) against the criteria:

- ``continuity``: the share of successful streams whose longest stall is at most 100 ms
  (:func:`turbotts.bench.loadtest_report.summarize_run`) must be at least ``min_continuity``;
- ``ttfa``: the 95th percentile of time to first audio must be at most ``max_ttfa_p95_s``;
- ``refused``: more than ``max_refused_share`` of the requests refused (HTTP 503/429 from
  admission or a rate limit). Refusals are no stalls, so they are counted apart.

The first failing level ends the search; the capacity is the highest passing level (0 when
level 1 fails). The report also names the machine, since a capacity means nothing without it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turbotts.bench.figures import new_figure, save_figure
from turbotts.bench.loadtest_client import LoadOptions, LoadRequest, RequestRecord, RunResult, run_load
from turbotts.bench.loadtest_player import CONTINUITY_STALL_S
from turbotts.bench.loadtest_report import request_rows, summarize_run

if TYPE_CHECKING:
    from rich.progress import Progress

REFUSED_STATUSES = (429, 503)
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")


@dataclass(frozen=True)
class CapacityCriteria:
    """What a level must meet to pass."""

    min_continuity: float = 0.99
    max_ttfa_p95_s: float = 1.0
    max_refused_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_continuity <= 1.0:
            raise ValueError(f"--min-continuity must be within 0..1, got {self.min_continuity}")
        if self.max_ttfa_p95_s <= 0:
            raise ValueError(f"--max-ttfa-p95-s must be positive, got {self.max_ttfa_p95_s}")
        if not 0.0 <= self.max_refused_share < 1.0:
            raise ValueError(f"max_refused_share must be within 0..1, got {self.max_refused_share}")


@dataclass(frozen=True)
class LevelVerdict:
    """One level's judgement; ``failed_on`` in the order ``refused``, ``continuity``, ``ttfa``."""

    is_passed: bool
    failed_on: tuple[str, ...]


@dataclass(frozen=True)
class CapacityPlan:
    """How to search: the levels, how long each runs, what each request says."""

    texts: tuple[str, ...]
    criteria: CapacityCriteria = CapacityCriteria()
    max_concurrency: int = 32
    level_duration_s: float = 30.0
    min_requests_per_listener: int = 3
    formats: tuple[str, ...] = ("pcm",)
    stream_format: str = "audio"
    is_seeded: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1 or self.min_requests_per_listener < 1:
            raise ValueError("--max-concurrency and --min-requests-per-listener must be at least 1")
        if self.level_duration_s < 0:
            raise ValueError(f"--level-duration-s must be >= 0, got {self.level_duration_s}")
        if not self.texts:
            raise ValueError("the capacity search needs at least one text")


@dataclass(frozen=True)
class CapacitySearch:
    capacity: int  # the highest passing level; 0 when level 1 fails
    stop_reason: str  # "refused", "continuity", "ttfa" or "max_concurrency"
    levels: list[dict[str, Any]]  # summarize_run's keys plus ttfa_p95_s, num_refused, passed, failed_on


def judge_level(summary: dict[str, Any], criteria: CapacityCriteria) -> LevelVerdict:
    """Pass or fail one level from its summary (:func:`summarize_level`); no I/O.

    A level with no successful stream fails on continuity and TTFA unless every request was refused.
    """
    num_requests, num_refused = summary["num_requests"], summary["num_refused"]
    has_answers = num_requests > num_refused  # some requests were let in: they must play well
    failed = []
    if num_requests and num_refused / num_requests > criteria.max_refused_share:
        failed.append("refused")
    continuity, ttfa_p95_s = summary["continuity_rate"], summary["ttfa_p95_s"]
    if (continuity is None and has_answers) or (continuity is not None and continuity < criteria.min_continuity):
        failed.append("continuity")
    if (ttfa_p95_s is None and has_answers) or (ttfa_p95_s is not None and ttfa_p95_s > criteria.max_ttfa_p95_s):
        failed.append("ttfa")
    return LevelVerdict(is_passed=not failed, failed_on=tuple(failed))


def summarize_level(result: RunResult, concurrency: int, slo_ttfa_s: float) -> dict[str, Any]:
    """:func:`summarize_run` plus what the judgement reads: TTFA p95 and the refused requests."""
    summary = summarize_run(result, {"concurrency": concurrency}, slo_ttfa_s)
    ttfas = sorted(r.ttfa_s for r in result.records if r.is_ok and r.ttfa_s is not None)
    ttfa_p95_s = ttfas[min(len(ttfas) - 1, round(0.95 * (len(ttfas) - 1)))] if ttfas else None  # as percentiles()
    num_refused = sum(r.status in REFUSED_STATUSES for r in result.records)
    return {"concurrency": concurrency, **summary, "ttfa_p95_s": ttfa_p95_s, "num_refused": num_refused}


def search_capacity(
    run_level: Callable[[int], dict[str, Any]], criteria: CapacityCriteria, max_concurrency: int
) -> CapacitySearch:
    """Levels 1, 2, ... ``max_concurrency`` (``run_level`` returns a level's summary) until one fails."""
    levels: list[dict[str, Any]] = []
    capacity, stop_reason = 0, "max_concurrency"
    for level in range(1, max_concurrency + 1):
        summary = run_level(level)
        verdict = judge_level(summary, criteria)
        levels.append({**summary, "passed": verdict.is_passed, "failed_on": list(verdict.failed_on)})
        if not verdict.is_passed:
            stop_reason = verdict.failed_on[0]
            break
        capacity = level
    return CapacitySearch(capacity, stop_reason, levels)


def endless_requests(plan: CapacityPlan) -> Iterator[LoadRequest]:
    """Closed-loop requests, texts and formats in turn, for as long as the level asks for more."""
    for index in itertools.count():
        text_index = index % len(plan.texts)
        yield LoadRequest(index, plan.texts[text_index], plan.formats[index % len(plan.formats)], plan.stream_format,
                          plan.seed + text_index if plan.is_seeded else None, 0.0)  # fmt: skip


def progress_columns() -> tuple[Any, ...]:
    """The bar of each level (and of whatever a caller shows beside it, with its own ``note``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    return (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"))  # fmt: skip


def find_capacity(options: LoadOptions, plan: CapacityPlan, progress: Progress | None = None) -> CapacitySearch:
    """Run the search against a live server, one rich progress bar per level (on stderr).

    ``progress``: a caller's live display to add the bars to (rich shows one at a time); else a new one.
    """
    if progress is None:
        from rich.console import Console
        from rich.progress import Progress

        with Progress(*progress_columns(), console=Console(stderr=True)) as own:
            return find_capacity(options, plan, own)
    bar = progress

    def run_level(level: int) -> dict[str, Any]:
        task = bar.add_task(f"{level} listener{'s' * (level > 1)}", total=None, note="")
        counts = {"refused": 0, "errors": 0}

        def advance(record: RequestRecord) -> None:
            counts["refused"] += record.status in REFUSED_STATUSES
            counts["errors"] += not record.is_ok and record.status not in REFUSED_STATUSES
            bar.update(task, advance=1, note=f"{counts['refused']} refused, {counts['errors']} errors")

        result = asyncio.run(
            run_load(options, endless_requests(plan), concurrency=level, duration_s=plan.level_duration_s,
                     min_requests_per_client=plan.min_requests_per_listener, on_done=advance)
        )  # fmt: skip
        bar.update(task, total=len(result.records))
        return {**summarize_level(result, level, plan.criteria.max_ttfa_p95_s), "requests": request_rows(result)}

    return search_capacity(run_level, plan.criteria, plan.max_concurrency)


def machine_info() -> dict[str, Any]:
    """The CPU the numbers came from: model name, family, model, the ISA flags that matter, core count."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass  # not Linux: the flags stay unknown
    flags = set(fields.get("flags", "").split())
    return {"cpu_model_name": fields.get("model name"), "cpu_family": fields.get("cpu family"),
            "cpu_model": fields.get("model"), "isa": {flag: flag in flags for flag in ISA_FLAGS},
            "cpu_count": os.cpu_count()}  # fmt: skip


def capacity_report(
    search: CapacitySearch, plan: CapacityPlan, config: dict[str, Any], label: str | None
) -> dict[str, Any]:
    """The JSON: capacity, criteria, stop reason, every level, the run's settings and the machine."""
    plan_config = {k: v for k, v in asdict(plan).items() if k not in ("criteria", "texts")}
    return {"capacity": search.capacity, "label": label, "criteria": asdict(plan.criteria),
            "stop_reason": search.stop_reason, "levels": search.levels, "config": {**plan_config, **config},
            "machine": machine_info()}  # fmt: skip


def _series(levels: list[dict[str, Any]], read: Callable[[dict[str, Any]], float | None]) -> list[float]:
    return [float("nan") if (value := read(level)) is None else value for level in levels]


def write_capacity_plot(report: dict[str, Any], path: Path, title: str) -> None:
    """Continuity, stall seconds (total and longest) and TTFA p95 against the level; thresholds and capacity drawn."""
    fig, (ax_continuity, ax_stall, ax_ttfa) = new_figure(3, (14, 4.2))
    levels, criteria = report["levels"], report["criteria"]
    xs = [level["concurrency"] for level in levels]
    ax_continuity.plot(xs, _series(levels, lambda lv: lv["continuity_rate"]), marker="o", color="tab:green")
    ax_continuity.axhline(criteria["min_continuity"], color="gray", linestyle=":",
                          label=f"min {criteria['min_continuity']:g}")  # fmt: skip
    ax_continuity.set(ylabel="share of streams", ylim=(-0.05, 1.05), title="Continuity (no stall over 100 ms)")
    ax_stall.plot(xs, _series(levels, lambda lv: lv["stall_s"]["total"]), marker="o", label="total (all streams)")
    ax_stall.plot(xs, _series(levels, lambda lv: lv["stall_s"]["max"]), marker="s", label="longest")
    ax_stall.axhline(CONTINUITY_STALL_S, color="gray", linestyle=":", label="100 ms")
    ax_stall.set(ylabel="seconds", title="Stalls")
    ax_ttfa.plot(xs, _series(levels, lambda lv: lv["ttfa_p95_s"]), marker="o", color="tab:blue")
    ax_ttfa.axhline(criteria["max_ttfa_p95_s"], color="gray", linestyle=":",
                    label=f"max {criteria['max_ttfa_p95_s']:g} s")  # fmt: skip
    ax_ttfa.set(ylabel="seconds", title="TTFA p95")
    for ax in (ax_continuity, ax_stall, ax_ttfa):
        if report["capacity"] > 0:
            ax.axvline(report["capacity"], color="tab:red", linestyle="--", label=f"capacity {report['capacity']}")
        ax.set_xlabel("concurrent listeners")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path, title)


def print_capacity_table(report: dict[str, Any]) -> None:
    """One row per level, and the capacity under the table (on stderr, as the progress bars)."""
    from rich.console import Console
    from rich.table import Table

    label = report["label"]
    table = Table(title="TurboTTS capacity" + (f" ({label})" if label else ""))
    for column in ("listeners", "ok", "refused", "contin", "TTFA p95", "stall total", "stall max", "verdict"):
        table.add_column(column)
    for lv in report["levels"]:
        continuity = lv["continuity_rate"]
        table.add_row(
            str(lv["concurrency"]), f"{lv['num_ok']}/{lv['num_requests']}", str(lv["num_refused"]),
            "-" if continuity is None else f"{continuity:.0%}",
            "-" if lv["ttfa_p95_s"] is None else f"{lv['ttfa_p95_s']:.3f}",
            f"{lv['stall_s']['total']:.3f}", f"{lv['stall_s']['max']:.3f}",
            "pass" if lv["passed"] else f"fail: {', '.join(lv['failed_on'])}",
        )  # fmt: skip
    console = Console(stderr=True)
    console.print(table)
    console.print(f"capacity: {report['capacity']} listeners (stopped: {report['stop_reason']})")


def run_capacity_command(
    options: LoadOptions,
    plan: CapacityPlan,
    config: dict[str, Any],
    label: str | None,
    json_path: Path,
    plot_path: Path | None,
) -> dict[str, Any]:
    """What ``--find-capacity`` does: search, write the JSON (and PNG), print the table; returns the report."""
    from turbotts.bench.report import write_json

    report = capacity_report(find_capacity(options, plan), plan, config, label)
    write_json(report, json_path)
    if plot_path is not None:
        write_capacity_plot(report, plot_path, f"TurboTTS capacity ({label or options.url})")
    print_capacity_table(report)
    return report
