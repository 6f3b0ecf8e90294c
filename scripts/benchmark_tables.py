"""Markdown tables of the benchmark results in ``docs/benchmarks/``: one section per machine kind.

The docs build calls :func:`benchmark_markdown` (``docs/hooks/reference.py``), so the published
tables are always the JSON files as they are. Run it alone to see the Markdown:

    python scripts/benchmark_tables.py [DOCS_BENCHMARKS_DIR]

A machine kind is the CPU's ISA as ``turbotts bench`` records it (``machine.cpu.isa``: ``amx``,
``avx512_bf16``, ``avx2``, ...). Files that record no CPU are placed by their folder
(``compare/<isa>/``) or, for the first runs, which recorded none, on the machine they were run on
(:data:`UNRECORDED_MACHINE`); the page lists them. The JSON files hold no date, so the dates of the
comparisons with the official package are kept here (:data:`COMPARISON_DATES`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turbotts.cpu.info import CpuInfo

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
#: the order machine kinds are shown in: a GPU, then CPUs, the most capable first
ISA_ORDER = ("cuda", "amx", "avx512_bf16", "avx512_vnni", "avx512", "avx2", "baseline")
#: the first benchmark files recorded no CPU; they were all measured on this project's 2-core AMD EPYC with AVX512-BF16
UNRECORDED_MACHINE = ("AMD EPYC", "avx512_bf16", 2)
#: when each comparison with the official package ran (folder -> date as recorded with the run)
COMPARISON_DATES = {
    "compare/amx": "2026-12-04",
    "compare/avx512_bf16": "2026-12-04",
    "compare/avx2": "2026-12-05",
    "compare/avx2/run_a": "2026-12-05",
}

Json = dict[str, Any]


@dataclass(frozen=True)
class Machine:
    """Where a result was measured; ``source`` says how it is known (``file``, ``folder`` or ``unrecorded``)."""

    model: str
    isa: str
    num_cpus: int | None
    source: str


@dataclass(frozen=True)
class Result:
    path: str  # relative to the benchmarks folder, with forward slashes
    kind: str  # compare, bench, quant_sweep, admission, scaleout, playground, official_phase, kernel_summary, other
    data: Json
    machine: Machine


def load_results(root: Path = DEFAULT_DIR) -> list[Result]:
    """Every JSON file under ``root``, classified and placed on a machine."""
    results = []
    for path in sorted(root.rglob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        rel = path.relative_to(root).as_posix()
        results.append(Result(rel, _kind(data), data, _machine(rel, data)))
    return results


def _kind(data: Json) -> str:
    shapes = [
        ("compare", ("official", "turbotts", "ratios")),
        ("bench", ("runs", "throughput_audio_s_per_s")),
        ("quant_sweep", ("modes", "reference")),
        ("admission", ("results", "frames_per_stream")),
        ("scaleout", ("single_process", "ray_1x2")),
        ("playground", ("sizes", "what")),
        ("official_phase", ("phase", "sys")),
        ("kernel_summary", ("mean_by_kernel",)),
    ]
    return next((kind for kind, keys in shapes if all(key in data for key in keys)), "other")


def _isa_from_flags(flags: Iterable[str]) -> str:
    flags = set(flags)
    if "amx_bf16" in flags:  # reports list amx_bf16 but not amx_tile, which CpuInfo.isa also asks for
        flags.add("amx_tile")
    return CpuInfo("", frozenset(flags)).isa


def _machine(rel: str, data: Json) -> Machine:
    recorded = data.get("machine") or {}
    device = str((data.get("config") or {}).get("device", "cpu"))
    if device.startswith("cuda"):  # benchmarks/gpu.sh: the GPU is the machine that matters
        return Machine(str(recorded.get("gpu", "CUDA GPU")), "cuda", None, "file")
    cpu = recorded.get("cpu") if isinstance(recorded, dict) else None
    num_cpus = recorded.get("cpu_count") or recorded.get("num_cpus")
    if isinstance(cpu, dict):  # turbotts bench, the comparison
        return Machine(cpu["model"], cpu["isa"], num_cpus, "file")
    if isinstance(cpu, str):  # the admission figures: the model, and the flags as a list
        return Machine(cpu, _isa_from_flags(recorded.get("isa", ())), num_cpus, "file")
    if "cpu_model_name" in recorded:  # loadtest --find-capacity: the ISA flags as a dict of booleans
        flags = [name for name, has in recorded["isa"].items() if has]
        return Machine(recorded["cpu_model_name"], _isa_from_flags(flags), num_cpus, "file")
    if "isa" in recorded:  # the Ray scale-out figures
        return Machine(recorded["model"], recorded["isa"], num_cpus, "file")
    if isinstance(data.get("cpu"), dict):  # the playground figures
        return Machine(data["cpu"]["model"], data["cpu"]["isa"], None, "file")
    folder_isa = next((part for part in rel.split("/")[:-1] if part in ISA_ORDER), None)
    if folder_isa is not None:  # compare/<isa>/official/... (the CPU's name, no ISA), int8_kernel/<isa>/summary.json
        return Machine(data.get("sys", {}).get("Model name", ""), folder_isa, None, "folder")
    model, isa, count = UNRECORDED_MACHINE
    return Machine(model, isa, count, "unrecorded")


# ---------------------------------------------------------------- formatting


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _frames(config: Json) -> str:
    low, high = config.get("output_len") or (None, None)
    return "-" if low is None else (f"{low}" if low == high else f"{low}-{high}")


# ---------------------------------------------------------------- the comparison with the official package


def _probe_auto(data: Json) -> Json | None:
    """The batch-1 probe of ``--quant auto`` in a lone-request run, whichever shape the file has."""
    if "turbotts_probes_by_quant" in data:
        return data["turbotts_probes_by_quant"].get("auto")
    probes = data.get("turbotts_probes") or {}
    return next((probe for key, probe in probes.items() if "lone" in key and key.endswith(":auto")), None)


def _vs(ours: float, official: float, ratio: float, unit: str = "") -> str:
    return f"{_num(ours)} vs {_num(official)}{unit}: **{ratio:.2f}x**"


def _comparison_rows(data: Json) -> list[tuple[str, str]]:
    official, ours, ratios = data["official"], data["turbotts"], data["ratios"]
    batch = official.get("static_batch_size", data.get("concurrency"))
    in_a_row, streamed = ours["sequential"], ours["continuous"]
    static_batch = official["static_batch_audio_s_per_s"]
    rows = [
        ("GPT precision chosen by `auto`", in_a_row["precision"]),
        (
            "requests in a row (audio-s/s)",
            _vs(
                in_a_row["audio_s_per_s"],
                official["sequential_audio_s_per_s"],
                ratios["sequential_over_official_sequential"],
            ),
        ),
        (
            f"{batch} at once, streamed (audio-s/s; official: static batch)",
            _vs(streamed["audio_s_per_s"], static_batch, ratios["continuous_over_official_static"]),
        ),
    ]
    if "continuous_whole" in ours:
        whole = ours["continuous_whole"]["audio_s_per_s"]
        ratio = ratios["continuous_whole_over_official_static"]
        rows.append((f"{batch} at once, whole utterances (audio-s/s)", _vs(whole, static_batch, ratio)))
    sooner = ratios["lone_ttfa_official_over_turbotts"]
    ttfa = f"p50 {_num(in_a_row['ttfa_p50_s'])} vs {_num(official['stream_ttfa_s'])}: **{sooner:.1f}x** sooner"
    rows.append(("time to first audio, lone request (s)", ttfa))
    rows.append((f"time to first audio, {batch} at once (s)", f"p50 {_num(streamed['ttfa_p50_s'])}"))
    rss = ratios["peak_rss_turbotts_over_official"]
    rss_cell = f"{data['turbotts_peak_rss_mib']:.0f} vs {official['static_batch_peak_rss_mib']:.0f}: **{rss:.2f}x**"
    rows.append(("peak RSS (MiB)", rss_cell))
    probe = _probe_auto(data)
    if probe is not None:
        step = f"{probe['batch1_step_ms']:.1f} vs {probe['roofline_step_ms']:.1f}: **{probe['roofline_ratio']:.2f}x**"
        rows.append(("batch-1 decode step vs weight-bytes roofline (ms)", step))
    return rows


def _column_title(result: Result, link: Callable[[str], str]) -> str:
    date = COMPARISON_DATES.get(result.path.rpartition("/")[0], "date not recorded")
    return f"[`{result.path}`]({link(result.path)}), {date}"


def _comparison_table(results: list[Result], link: Callable[[str], str]) -> str:
    """One table, a column per comparison run of this machine kind: TurboTTS vs official, and the ratio."""
    columns = [_comparison_rows(result.data) for result in results]
    header = ["", *(_column_title(result, link) for result in results)]
    names = [name for name, _ in columns[0]]
    rows = [[name, *(dict(column).get(name, "-") for column in columns)] for name in names]
    return _table(header, rows)


def _comparison_inputs(result: Result, root: Path, link: Callable[[str], str]) -> str:
    """The runs a comparison was computed from: the official phases and TurboTTS's bench files beside it."""
    folder = root / result.path.rpartition("/")[0]
    official = sorted(folder.glob("official/*.json"))
    inputs = [p.relative_to(root).as_posix() for p in [*official, *sorted(folder.glob("turbotts_*.json"))]]
    line = f"`{result.path}` is computed from " + ", ".join(f"[`{path}`]({link(path)})" for path in inputs)
    return line + ("." if official else "; the official package's phase files of this run were not kept.")


# ---------------------------------------------------------------- turbotts bench runs


def _bench_rows(result: Result, link: Callable[[str], str]) -> list[list[str]]:
    data, config = result.data, result.data.get("config") or {}
    rate = config.get("request_rate")
    probes = data.get("probes_by_quant") or {}
    rows = []
    for run in data.get("runs") or [data]:
        load = f"Poisson {rate:g}/s" if rate else f"c={run['concurrency']}"
        load += f", {run['num_requests']} x {_frames(config)} frames"
        if config.get("is_streaming") is False:
            load += ", whole"
        quant = run.get("quant") or config.get("quant")
        precision = run.get("precision") or f"{config.get('dtype')}/{quant}/vocoder {config.get('vocoder_dtype')}"
        if data.get("int8_kernel") and "int8" in precision:
            precision += f" ({data['int8_kernel']})"
        probe = probes.get(quant) or (data if len(probes) <= 1 else {})
        step = probe.get("batch1_step_ms")
        step_cell = "-" if step is None else f"{step:.1f} ({_num(probe.get('roofline_ratio'))}x)"
        throughput, ttfa = _num(run["throughput_audio_s_per_s"]), _num(run["ttfa_s"]["p50"])
        rows.append(
            [f"[`{result.path}`]({link(result.path)})", run["mode"], load, precision, throughput, ttfa, step_cell]
        )
    return rows


def _bench_table(results: list[Result], link: Callable[[str], str]) -> str:
    header = [
        "file",
        "mode",
        "load",
        "GPT / vocoder precision",
        "audio-s/s",
        "TTFA p50 (s)",
        "batch-1 step, ms (x roofline)",
    ]
    return _table(header, [row for result in results for row in _bench_rows(result, link)])


# ---------------------------------------------------------------- the other result files


def _quant_sweep_table(data: Json) -> str:
    rows = [
        [name, f"{mode['weight_bytes'] / 1e6:.1f} MB", f"{mode['step_ms_batch1']:.1f}",
         f"{mode['step_ms_batch16']:.1f}", _num(mode["code_agreement"]), _num(mode["kl"], 2), f"{mode['mcd_db']:.2f}"]
        for name, mode in data["modes"].items()
    ]  # fmt: skip
    header = ["mode", "GPT + heads", "batch-1 step (ms)", "batch-16 step (ms)", "code agreement", "KL", "MCD (dB)"]
    weights = "random (dummy) weights: the quality columns say nothing of real audio" if data.get("is_dummy") else ""
    return _table(header, rows) + f"\n\nAgainst {data['reference']}, {data['num_frames']} frames per text; {weights}."


def _admission_table(data: Json) -> str:
    rows = []
    for result in data["results"]:
        for mode, runs in result["runs"].items():
            for run in runs:
                ttfa = f"{_num(run['ttfa_s']['p50'], 2)}, {_num(run['ttfa_s']['p99'], 2)}"
                rows.append([result["quant"], str(result["capacity_streams"]), mode, str(run["clients"]),
                             f"{run['num_ok']}/{run['num_503']}", f"{run['continuity_rate']:.2f}",
                             f"{run['goodput_rps']:.2f}", ttfa])  # fmt: skip
    header = ["GPT quant", "capacity (streams)", "admission", "clients", "200/503", "continuity", "goodput (req/s)",
              "TTFA p50, p99 (s)"]  # fmt: skip
    return _table(header, rows) + (
        f"\n\nStreams of {data['frames_per_stream']} frames, a {data['prebuffer_ms']} ms "
        f"player buffer, TTFA objective {data['slo_ttfa_s']} s, margin "
        f"{data['realtime_margin']}, `max_queue_wait_s` {data['max_queue_wait_s']}."
    )


def _scaleout_table(data: Json) -> str:
    single, ray = data["single_process"], data["ray_1x2"]
    aware, default = data["l1_cache_aware"], data["l1_default_router"]

    def ms(run: Json, key: str, digits: int = 0) -> str:
        return f"{run[key] * 1e3:.{digits}f}"

    two = data["ray_2x1"]["c16"]
    rows = [
        ["`/healthz` round trip p50 (ms)", ms(single["healthz"], "p50_s", 1), ms(ray["healthz"], "p50_s", 1), "-"],
        ["TTFA p50 at c=1 (ms)", ms(single["c1"], "ttfa_p50_s"), ms(ray["c1"], "ttfa_p50_s"), "-"],
        ["TTFA p50 at c=16 (ms)", ms(single["c16"], "ttfa_p50_s"), ms(ray["c16"], "ttfa_p50_s"), ms(two, "ttfa_p50_s")],
        ["audio-s/s at c=16", *(_num(run["audio_s_per_s"]) for run in (single["c16"], ray["c16"], two))],
    ]
    table = _table(["", "one process", "Ray, 1 replica x 2 threads", "Ray, 2 replicas x 1 thread"], rows)
    hits = (
        f"L1 cache hits of {aware['num_requests']} requests: cache-aware router {aware['cache']['l1']}, "
        f"Ray's default router {default['cache']['l1']} ({default['cache']['l2']} from Redis)."
    )
    load = data.get("load_avg_at_start") or [None]
    return f"{table}\n\n{hits} One-minute load average at the start: {_num(load[0], 2)}."


def _playground_table(data: Json) -> str:
    rows = [
        [size, fmt, f"{cell['first_chunk_ms']['p50']:,.0f}",
         f"{cell['ttfa_ms']['p50']:,.0f} ({cell['ttfa_ms']['p90']:,.0f})", str(cell["num_trials"])]
        for size, formats in data["sizes"].items()
        for fmt, cell in formats.items()
    ]  # fmt: skip
    header = ["dummy weights", "format", "first SSE chunk, p50 (ms)", "first sample played, p50 (p90) (ms)", "trials"]
    return _table(header, rows) + f"\n\n{data['server']}; {data['what']}."


OTHER_TABLES: dict[str, tuple[str, Callable[[Json], str]]] = {
    "quant_sweep": ("Precision modes against fp32 (`turbotts quant-sweep`)", _quant_sweep_table),
    "admission": ("Real-time admission (`scripts/admission_figures.py`)", _admission_table),
    "scaleout": ("Scale-out on Ray Serve, tiny model (`benchmarks/ray_scaleout.py`)", _scaleout_table),
    "playground": (
        "Playground time to first audio in the browser (`benchmarks/playground_ttfa.py`)",
        _playground_table,
    ),
}


# ---------------------------------------------------------------- the page


def _pictures(results: list[Result], root: Path, link: Callable[[str], str]) -> list[str]:
    """The PNG of each result; in a folder with a folder-wide PNG (one no JSON is named for), that one only."""
    folders = sorted({result.path.rpartition("/")[0] for result in results})
    stems = {result.path[: -len(".json")] for result in results}
    pictures = []
    for folder in folders:
        pngs = sorted(p.relative_to(root).as_posix() for p in (root / folder).glob("*.png"))
        all_stems = {p.relative_to(root).as_posix()[: -len(".json")] for p in (root / folder).glob("*.json")}
        shared = [png for png in pngs if png[: -len(".png")] not in all_stems]
        pictures += shared or [png for png in pngs if png[: -len(".png")] in stems]
    return [f"![{png}]({link(png)})" for png in pictures]


def _machine_section(results: list[Result], root: Path, link: Callable[[str], str]) -> str:
    known = [r.machine for r in results if r.machine.source == "file"] or [r.machine for r in results]
    machine = max(known, key=lambda m: (bool(m.model), m.num_cpus or 0))
    cores = f"{machine.num_cpus}-core " if machine.num_cpus else ""
    parts = [f"## {cores}{machine.model or 'CPU'}, ISA `{machine.isa}`"]
    compare = [r for r in results if r.kind == "compare"]
    if compare:
        parts += ["### Against the official chattts 0.2.5", _comparison_table(compare, link)]
        parts += [_comparison_inputs(result, root, link) for result in compare]
        parts += _pictures(compare, root, link)
    bench = [r for r in results if r.kind == "bench" and not r.path.startswith("compare/")]
    if bench:
        parts += ["### Engine runs (`turbotts bench`)", _bench_table(bench, link), *_pictures(bench, root, link)]
    for kind, (title, render) in OTHER_TABLES.items():
        for result in (r for r in results if r.kind == kind):
            parts += [f"### {title}", f"[`{result.path}`]({link(result.path)})", render(result.data)]
            parts += _pictures([result], root, link)
    return "\n\n".join(parts)


def _unplaced_section(unplaced: list[Result]) -> str:
    model, isa, count = UNRECORDED_MACHINE
    parts = ["## Files that record no CPU ISA"]
    by_folder = [f"- `{r.path}`" for r in unplaced if r.machine.source == "folder"]
    if by_folder:
        parts += ["Placed by the ISA their folder names:", "\n".join(by_folder)]
    unrecorded = [f"- `{r.path}`" for r in unplaced if r.machine.source == "unrecorded"]
    if unrecorded:
        where = f"Placed on the {count}-core {model} (`{isa}`) they were measured on (the first files recorded no CPU):"
        parts += [where, "\n".join(unrecorded)]
    return "\n\n".join(parts)


def benchmark_markdown(root: Path = DEFAULT_DIR, link_prefix: str = "") -> str:
    """The tables of every result under ``root``, one ``##`` section per machine kind, most capable first.

    Args:
        root: the folder of result files (``docs/benchmarks``).
        link_prefix: prepended to each file's path in links, relative to the page that shows them.
    """

    def link(path: str) -> str:
        return link_prefix + path

    results = load_results(root)
    by_isa: dict[str, list[Result]] = {}
    for result in results:
        by_isa.setdefault(result.machine.isa, []).append(result)
    order = sorted(by_isa, key=lambda isa: ISA_ORDER.index(isa) if isa in ISA_ORDER else len(ISA_ORDER))
    sections = [_machine_section(by_isa[isa], root, link) for isa in order]
    unplaced = [r for r in results if r.machine.source != "file"]
    if unplaced:
        sections.append(_unplaced_section(unplaced))
    other = [r.path for r in results if r.kind == "other"]
    if other:
        sections.append("## Other result files\n\n" + ", ".join(f"`{path}`" for path in other))
    return "\n\n".join(sections) + "\n"


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else DEFAULT_DIR
    sys.stdout.write(benchmark_markdown(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
