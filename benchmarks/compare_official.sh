#!/usr/bin/env bash
# TurboTTS and the official chattts 0.2.5 on one machine, one checkpoint, one workload: ratios as JSON + PNG.
#
#   benchmarks/compare_official.sh OFFICIAL_BENCH_DIR OFFICIAL_VENV [OUT_DIR]
#
# OFFICIAL_BENCH_DIR holds bench_official.py (the measuring scripts, e.g. ../shared/official-bench);
# OFFICIAL_VENV is the venv its setup_venv.sh built. Env: N (frames per request, 128), COUNT (batch, 16),
# SEQ_COUNT (requests in a row, 4). Both sides load the same full-size random checkpoint in the official
# layout, written by the official side's make_checkpoint.py; nothing of the official package is imported by TurboTTS.
set -euo pipefail
BENCH_DIR=${1:?usage: $0 OFFICIAL_BENCH_DIR OFFICIAL_VENV [OUT_DIR]}
VENV=${2:?usage: $0 OFFICIAL_BENCH_DIR OFFICIAL_VENV [OUT_DIR]}
N=${N:-128}
COUNT=${COUNT:-16}
SEQ_COUNT=${SEQ_COUNT:-4}
cd "$(dirname "$0")/.."
. .venv/bin/activate
ISA=$(python -c "from turbotts.cpu.info import cpu_info; print(cpu_info().isa)")
OUT=${3:-docs/benchmarks/compare/$ISA}  # one directory per machine kind: runs on other CPUs never overwrite it
mkdir -p "$OUT"
CKPT=${CKPT:-$HOME/.cache/turbotts-compare/ckpt-full}
if [ ! -f "$CKPT/asset/gpt/model.safetensors" ]; then
  "$VENV/bin/python" "$BENCH_DIR/make_checkpoint.py" --size full --out "$CKPT" >&2
fi
# the same file under the name TurboTTS reads for a non-official checkpoint (random weights fail the digests)
cp "$CKPT/chattts_config.json" "$CKPT/config.json"
echo "machine ISA: $ISA; N=$N frames, batch $COUNT" >&2
for phase in seq8 batch8 stream; do
  count=$COUNT; [ "$phase" = seq8 ] && count=$SEQ_COUNT
  "$VENV/bin/python" "$BENCH_DIR/bench_official.py" --phase "$phase" --ckpt "$CKPT" --n "$N" --count "$count" \
    --results-dir "$OUT/official" > "$OUT/official_$phase.log" 2>&1
  echo "official $phase done" >&2
done
# requests in a row (each alone: its TTFA is a lone request's), then all at once (static batch, continuous);
# each precision in a process of its own, so its peak RSS is its own (a freed model's heap stays resident)
for quant in none auto; do
  turbotts bench --checkpoint "$CKPT" --load-format auto --mode sequential --num-requests "$SEQ_COUNT" --concurrency 1 \
    --output-len "$N" --quant "$quant" --json "$OUT/turbotts_lone_$quant.json"
  turbotts bench --checkpoint "$CKPT" --load-format auto --mode static,continuous --num-requests "$COUNT" \
    --concurrency "$COUNT" --output-len "$N" --quant "$quant" --json "$OUT/turbotts_c${COUNT}_$quant.json" \
    --plot "$OUT/turbotts_c${COUNT}_$quant.png"
done
# the same c=16 load asking for each utterance whole (decoded once at the end), as the official static batch
# returns it and the server does for buffered formats: the like-for-like row
turbotts bench --checkpoint "$CKPT" --load-format auto --mode continuous --num-requests "$COUNT" \
  --concurrency "$COUNT" --output-len "$N" --quant auto --no-stream --json "$OUT/turbotts_c${COUNT}_whole_auto.json"
python -m turbotts.bench.compare --official-dir "$OUT/official" \
  --turbotts-json "$OUT"/turbotts_lone_{none,auto}.json "$OUT"/turbotts_c"$COUNT"_{none,auto}.json \
  "$OUT/turbotts_c${COUNT}_whole_auto.json" \
  --concurrency "$COUNT" --json "$OUT/compare_$ISA.json" --plot "$OUT/compare_$ISA.png"
