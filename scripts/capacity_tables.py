"""Markdown tables of a capacity comparison (``scripts/capacity_bench.py``'s ``capacity.json``), for the docs.

The docs hook calls :func:`capacity_markdown` at build time (marker ``<!-- generated: capacity -->``),
so the page shows what the JSON holds and cannot drift from it.
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
