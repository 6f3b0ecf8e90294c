#!/usr/bin/env bash
# On a CUDA GPU: CUDA graphs against eager decode, bf16, at concurrency 1/16/64/256; JSON (+ PNG) per decode mode.
#
#   benchmarks/gpu.sh [OUT_DIR]      (default docs/benchmarks/gpu)
#
# Needs a CUDA build of torch (scripts/setup.sh with TORCH_SPEC, see docs/getting-started.md). Full-size dummy weights,
# 128 frames per request, 256 requests per level.
set -euo pipefail
OUT=${1:-docs/benchmarks/gpu}
cd "$(dirname "$0")/.."
. .venv/bin/activate
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: run this where one is')"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" || true
for mode in graphs eager; do
  turbotts bench --device cuda --dtype bf16 --quant none --decode-mode "$mode" --mode continuous \
    --num-requests 256 --concurrency 1,16,64,256 --max-batch-size 256 --output-len 128 --kv-budget-mb 65536 \
    --json "$OUT/continuous_$mode.json" --plot "$OUT/continuous_$mode.png"
done
python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = {m: {r["concurrency"]: r["throughput_audio_s_per_s"] for r in json.loads((out / f"continuous_{m}.json").read_text())["runs"]}
        for m in ("graphs", "eager")}
summary = {c: {"graphs": rows["graphs"][c], "eager": rows["eager"][c], "graphs_over_eager": rows["graphs"][c] / rows["eager"][c]}
           for c in rows["graphs"]}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
