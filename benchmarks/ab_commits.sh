#!/usr/bin/env bash
# Interleaved A/B of the engine at two commits on one box: old, new, old, new (noisy boxes drift between runs).
#
#   benchmarks/ab_commits.sh OLD_REV [OUT_DIR]
#
# Runs `turbotts bench --quant auto` at c=16 (all at once) and with Poisson arrivals (REQUEST_RATE, 2/s) for
# ROUNDS (2) rounds, the old side from a git worktree of OLD_REV and the new side from this checkout, with this
# checkout's venv. CKPT: the full-size checkpoint (compare_official.sh writes one). JSON + PNG per run in OUT_DIR.
set -euo pipefail
OLD_REV=${1:?usage: $0 OLD_REV [OUT_DIR]}
cd "$(dirname "$0")/.."
ROOT=$PWD
. .venv/bin/activate
ISA=$(python -c "from turbotts.cpu.info import cpu_info; print(cpu_info().isa)")
OUT=${2:-docs/benchmarks/ab/$ISA}
mkdir -p "$OUT"
CKPT=${CKPT:-$HOME/.cache/turbotts-compare/ckpt-full}
ROUNDS=${ROUNDS:-2}
REQUEST_RATE=${REQUEST_RATE:-2}
OLD_TREE=$(mktemp -d)/old
git worktree add -q --detach "$OLD_TREE" "$OLD_REV"
trap 'git worktree remove --force "$OLD_TREE"' EXIT
for round in $(seq "$ROUNDS"); do
  for side in old new; do
    tree=$ROOT; [ "$side" = old ] && tree=$OLD_TREE
    for load in c16 poisson; do
      args=(--concurrency 16 --num-requests 16); [ "$load" = poisson ] && args=(--request-rate "$REQUEST_RATE" --num-requests 32)
      (cd "$tree" && PYTHONPATH=$tree python -m turbotts bench --checkpoint "$CKPT" --load-format auto --quant auto \
        --mode continuous "${args[@]}" --output-len 128 --json "$ROOT/$OUT/${load}_${side}_$round.json" \
        --plot "$ROOT/$OUT/${load}_${side}_$round.png")
    done
    echo "round $round: $side done" >&2
  done
done
# one PNG of the whole A/B: throughput and TTFA p50 per load, round and side
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = Path(sys.argv[1])
runs = sorted(out.glob("*_*_*.json"))
labels, throughput, ttfa = [], [], []
for path in runs:
    load, side, rnd = path.stem.split("_")
    run = json.loads(path.read_text())["runs"][0]
    labels.append(f"{load} r{rnd} {side}")
    throughput.append(run["throughput_audio_s_per_s"])
    ttfa.append(run["ttfa_s"]["p50"])
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
colors = ["tab:gray" if "old" in label else "tab:blue" for label in labels]
for ax, values, title in ((axes[0], throughput, "audio s per s"), (axes[1], ttfa, "TTFA p50 (s)")):
    ax.barh(labels, values, color=colors)
    ax.set_title(title)
fig.suptitle(f"A/B, old (gray) vs new (blue): {out}")
fig.tight_layout()
fig.savefig(out / "ab.png", dpi=110)
PY
