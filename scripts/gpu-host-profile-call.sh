#!/usr/bin/env bash
# On the GPU machine, from the repository root: where the host's time goes in a training
# micro-step (`bench --host-profile`, a diagnostic build: `cargo build --release -p medddpm
# --features cuda,host-profile` with CARGO_PROFILE_RELEASE_STRIP=false), and `medddpm train`
# with the data cache on and off, in the other order than gpu-engine-call.sh, and once without
# the GPU trace.
#
#   scripts/gpu-host-profile-call.sh OUTDIR
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
work=$(mktemp -d); mkdir -p "$work/logs"
{ nvidia-smi; echo "cuBLAS: ${MEDDDPM_CUBLAS:-system}"; } > "$work/logs/machine.txt" 2>&1
/tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --host-profile --out "$work/bench" --timeout 300 > "$work/logs/bench-bf16.log" 2>&1
echo "bench rc=$?"; grep -E "median|GPU per" "$work/logs/bench-bf16.log" | cut -c1-300
for f in "$work"/bench/host-profile-*.folded; do
  [ -f "$f" ] || continue
  python3 scripts/host-profile-summary.py "$f" --top 25 > "$work/logs/$(basename "$f" .folded)-summary.txt"
  head -80 "$work/logs/$(basename "$f" .folded)-summary.txt" | cut -c1-220
done
run_train() {  # name cache trace
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = $2|" \
      -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml > "$work/train-$1.toml"
  trace=""; [ "$3" = yes ] && trace="--gpu-trace 10"
  /tmp/medddpm train --experiment "$work/train-$1.toml" --run-dir "$work/run-$1" \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn $trace > "$work/logs/train-$1.log" 2>&1
  echo "train $1 (cache $2, trace $3) rc=$?"
  cp "$work/run-$1/metrics.jsonl" "$work/logs/metrics-$1.jsonl"
  cp "$work/run-$1/gpu-trace.json" "$work/logs/train-gpu-trace-$1.json" 2>/dev/null
  python3 - "$work/logs/metrics-$1.jsonl" <<'PY'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step: median {1e3 * statistics.median(dt):.1f} ms over steps {m[5]['step']}-{m[-1]['step']}")
PY
  grep "GPU trace" "$work/logs/train-$1.log" | cut -c1-200
}
run_train nocache-trace false yes
run_train cache-trace true yes
run_train cache-notrace true no
run_train nocache-notrace false no
cp -r "$work/bench" "$work/logs/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$work" logs
pack_tune_cache "$out"
