"""Markdown tables of a capacity comparison (``scripts/capacity_bench.py``'s ``capacity.json``), for the docs.

The docs hook calls :func:`capacity_markdown` at build time (marker ``<!-- generated: capacity -->``)
and :func:`engine_listeners_markdown` (``<!-- generated: engine-listeners -->``, from
``scripts/engine_listeners.py``'s JSON), so the page shows what the JSON holds and cannot drift from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def capacity_markdown(path: Path) -> str:
    """The machine, one row per configuration (its capacity), then every level of every configuration."""
    configs: list[dict[str, Any]] = json.loads(path.read_text())["configs"]
    first = configs[0]
    machine, plan, criteria = first["machine"], first["config"], first["criteria"]
    isa = ", ".join(name for name, has in machine["isa"].items() if has) or "no AVX2"
    lines = [
        f"Machine: {machine['cpu_model_name']}, cpu family {machine['cpu_family']} model {machine['cpu_model']}, "
        f"{machine['cpu_count']} cores ({isa}). Full-size random weights ({plan['dummy_size']}), precision "
        f"`{plan['dtype']}`/`{plan['quant']}`, vocoder `{plan['vocoder_dtype']}`; closed-loop listeners with a "
        f"{plan['prebuffer_ms'] / 1000:g} s player buffer, {plan['level_duration_s']:g} s per level, "
        f"`max_new_tokens` {plan['body'].get('max_new_tokens')}. A level passes with continuity >= "
        f"{criteria['min_continuity']:g} and TTFA p95 <= {criteria['max_ttfa_p95_s']:g} s.",
        "",
        "| scheduling, admission | gap-free listeners | stopped on |",
        "|---|---:|---|",
    ]
    lines += [f"| {c['label']} | **{c['capacity']}** | {c['stop_reason']} |" for c in configs]
    lines += [
        "",
        "| scheduling, admission | listeners | requests (refused) | continuity | stall total / max s "
        "| TTFA p95 s | audio s/s | passed |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in configs:
        for level in c["levels"]:
            continuity = level["continuity_rate"]
            ttfa = level["ttfa_p95_s"]
            lines.append(
                f"| {c['label']} | {level['concurrency']} | {level['num_requests']} ({level['num_refused']}) "
                f"| {'-' if continuity is None else f'{continuity:.2f}'} "
                f"| {level['stall_s']['total']:.2f} / {level['stall_s']['max']:.2f} "
                f"| {'-' if ttfa is None else f'{ttfa:.2f}'} | {level['throughput_audio_s_per_s']:.2f} "
                f"| {'yes' if level['passed'] else 'no: ' + ', '.join(level['failed_on'])} |"
            )
    return "\n".join(lines)


def engine_listeners_markdown(directory: Path) -> str:
    """One row per listener count and scheduling mode, from every ``engine_listeners_*.json`` in ``directory``."""
    lines = [
        "| listeners | scheduling | streams | continuity | stall total s | audio s/s | GPT share | vocoder share "
        "| frames decoded per frame sent | steps/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    machine = ""
    reports = [json.loads(path.read_text()) for path in sorted(directory.glob("engine_listeners_*.json"))]
    for report in sorted(reports, key=lambda r: r["listeners"]):
        cpu = report["machine"]["cpu"]
        machine = f"{cpu['model']}, cpu family {cpu['family']} model {cpu['model_number']} ({', '.join(cpu['flags'])})"
        for run in report["runs"]:
            lines.append(
                f"| {report['listeners']} | {run['scheduling']} | {run['num_streams']} | {run['continuity_rate']:.2f} "
                f"| {run['stall_s_total']:.2f} | {run['audio_s_per_s']:.2f} | {run['gpt_share']:.2f} "
                f"| {run['vocoder_share']:.2f} | {run['decoded_per_sent_frame']:.2f} | {run['steps_per_s']:.1f} |"
            )
    if not reports:
        return "(no engine_listeners_*.json measured yet)"
    return (
        f"Machine: {machine}; {reports[0]['duration_s']:g} s per run, {reports[0]['buffer_s']:g} s player buffer.\n\n"
        + "\n".join(lines)
    )
