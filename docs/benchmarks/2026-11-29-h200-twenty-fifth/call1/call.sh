#!/usr/bin/env bash
# Twenty-fifth session, call 1: the first steps on a fresh machine with no caches, check-kernels
# (bf16, fp32), then the bf16 bench with the GroupNorm experiment switches (tiles x unroll), then
# `medddpm train` twice.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary
work=$(mktemp -d); mkdir -p "$work/logs"
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
nvidia-smi > "$work/logs/machine.txt" 2>&1
# 1. No caches at all (an empty tuning-cache root), first thing on this machine.
t0=$(date +%s.%N)
MEDDDPM_TUNE_CACHE=/tmp/nocache /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc \
  --conv-engine cudnn --warmup 1 --steps 2 --out "$work/nocache" --timeout 400 > "$work/logs/nocache-bf16.log" 2>&1
echo "nocache rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
grep -E "first|median" "$work/logs/nocache-bf16.log" | cut -c1-200
tune_cache
for p in bf16 fp32; do
  timeout 200 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision $p > "$work/logs/check-kernels-$p.log" 2>&1
  echo "check-kernels $p rc=$?"; grep -iE "norm|fail|pass" "$work/logs/check-kernels-$p.log" | tail -4 | cut -c1-300
done
for v in "1 4" "0 1" "1 1" "0 4" "1 4"; do
  set -- $v
  name=tiles$1-unroll$2
  MEDDDPM_NORM_TILES=$1 MEDDDPM_NORM_UNROLL=$2 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out "$work/$name" --timeout 300 > "$work/logs/bench-$name.log" 2>&1
  echo "$name rc=$?"; grep -E "median|GPU per" "$work/logs/bench-$name.log" | cut -c1-700
  python3 - "$work/$name/results.jsonl" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ('train_gpu', 'sample_gpu'):
        g = r.get(k) or {}
        print(' ', k, ', '.join(f"{t['name'][:28]} {t['ms']:.2f}" for t in g.get('top', []) if any(s in t['name'] for s in ('moments', 'sums', 'normalise', 'input_grad', 'param_grads'))))
EOF2
  cp -r "$work/$name" "$work/logs/"
done
for r in 1 2; do
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
      -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml > "$work/train-$r.toml"
  trace=""; [ $r = 2 ] && trace="--gpu-trace 10"
  /tmp/medddpm train --experiment "$work/train-$r.toml" --run-dir "$work/run-$r" \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn $trace > "$work/logs/train-$r.log" 2>&1
  echo "train $r rc=$?"; grep -E "GPU trace" "$work/logs/train-$r.log" | cut -c1-900
  cp "$work/run-$r/metrics.jsonl" "$work/logs/metrics-$r.jsonl"
  cp "$work/run-$r/gpu-trace.json" "$work/logs/train-gpu-trace-$r.json" 2>/dev/null
  python3 - "$work/logs/metrics-$r.jsonl" <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms")
EOF2
done
cp -r "$work/nocache" "$work/logs/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$work" logs
pack_tune_cache "$out"
ls -la "$out"
