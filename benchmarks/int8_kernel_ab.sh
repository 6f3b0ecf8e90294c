#!/usr/bin/env bash
# The int8 decode paths on this machine: fbgemm alone, our tile kernel for the matmuls only
# (TURBOTTS_DECODE_STACK=0), and the kernel with the fused decode stack (the default). Lone-request
# throughput, TTFA and the batch-1 step, ROUNDS interleaved runs of each (the box's noise shows as the
# spread), as JSON + PNG.
#
#   benchmarks/int8_kernel_ab.sh [OUT_DIR]     (default docs/benchmarks/int8_kernel/<isa>)
#
# Env: ROUNDS (2), N (frames per request, 128), COUNT (requests in a row, 6).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
ROUNDS=${ROUNDS:-2}
N=${N:-128}
COUNT=${COUNT:-6}
ISA=$(python -c "from turbotts.cpu.info import cpu_info; print(cpu_info().isa)")
OUT=${1:-docs/benchmarks/int8_kernel/$ISA}
mkdir -p "$OUT"
for round in $(seq "$ROUNDS"); do
  # variant: TURBOTTS_INT8_GEMV (0 = fbgemm for every int8 matmul), TURBOTTS_DECODE_STACK (0 = no fused step)
  for variant in "0 0" "1 0" "1 1"; do
    read -r kernel stack <<<"$variant"
    TURBOTTS_INT8_GEMV=$kernel TURBOTTS_DECODE_STACK=$stack turbotts bench --quant int8 --mode continuous \
      --concurrency 1 --num-requests "$COUNT" --output-len "$N" \
      --json "$OUT/kernel${kernel}_stack${stack}_round${round}.json"
  done
done
python - "$OUT" "$ISA" <<'PY'
import json, sys
from pathlib import Path
from turbotts.bench.figures import new_figure, save_figure

out, isa = Path(sys.argv[1]), sys.argv[2]
rows = []
for path in sorted(out.glob("kernel*_stack*_round*.json")):
    report = json.loads(path.read_text())
    probe = report["probes_by_quant"]["int8"]
    run = report["runs"][0]
    rows.append({
        "file": path.name, "int8_kernel": probe["int8_kernel"], "batch1_step_ms": probe["batch1_step_ms"],
        "roofline_ratio": probe["roofline_ratio"], "bandwidth_gb_s": report["memory_bandwidth_gb_s"],
        "throughput_audio_s_per_s": run["throughput_audio_s_per_s"], "ttfa_p50_s": report["ttfa_s"]["p50"],
    })
kernels = sorted({r["int8_kernel"] for r in rows}, key=lambda k: (k != "fbgemm", len(k)))
def mean(kernel, key):
    values = [r[key] for r in rows if r["int8_kernel"] == kernel]
    return sum(values) / len(values)
summary = {k: {key: mean(k, key) for key in ("batch1_step_ms", "throughput_audio_s_per_s", "ttfa_p50_s")} for k in kernels}
(out / "summary.json").write_text(json.dumps({"isa": isa, "runs": rows, "mean_by_kernel": summary}, indent=2))
fig, axes = new_figure(3, (11, 3.4))
for ax, key, label in zip(axes, ("batch1_step_ms", "throughput_audio_s_per_s", "ttfa_p50_s"),
                          ("batch-1 engine step (ms)", "lone-request throughput (audio s/s)", "TTFA p50 (s)")):
    for i, k in enumerate(kernels):
        values = [r[key] for r in rows if r["int8_kernel"] == k]
        ax.scatter([i] * len(values), values)
        ax.bar(i, sum(values) / len(values), alpha=0.4)
    ax.set_xticks(range(len(kernels)), [k.replace("+", "\n+") for k in kernels], fontsize=7)
    ax.set_title(label, fontsize=9)
save_figure(fig, out / "int8_kernel.png", f"int8 decode: fbgemm, tile kernel, fused stack ({isa}, {len(rows)} runs)")
print(json.dumps(summary, indent=2))
PY
