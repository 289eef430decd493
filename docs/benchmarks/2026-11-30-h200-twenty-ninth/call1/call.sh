#!/usr/bin/env bash
# Twenty-ninth session, call 1: the tuning results shipped for compute capability 9.0.
# (1) first steps on a fresh machine (empty cache folder, empty HOME) with the shipped results,
# then (2) without them (--no-shipped-tuning), a second empty folder and HOME;
# (3) the bf16 bench with CUDA graphs and a TF32 bench, caches warm from (1);
# (4) medddpm train (40 steps) as it comes and with graphs: losses compared, peak from nvidia-smi.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary
w=/tmp/c1; mkdir -p $w /tmp/home-a /tmp/home-b
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
for run in shipped scratch; do
  flag=""; [ $run = scratch ] && flag="--no-shipped-tuning"
  home=/tmp/home-a; [ $run = scratch ] && home=/tmp/home-b
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-fresh-$run.txt &
  smi=$!
  HOME=$home MEDDDPM_TUNE_CACHE=/tmp/fresh-$run timeout 150 /tmp/medddpm bench \
    --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --warmup 1 --steps 3 $flag \
    --out $w/fresh-$run --timeout 140 > $w/bench-fresh-$run.log 2>&1
  echo "fresh $run rc=$? peak $(sort -n $w/smi-fresh-$run.txt | tail -1) MiB"; kill $smi
  grep -E "^tuning|tuned|first .*(took|threads)|median" $w/bench-fresh-$run.log | cut -c1-300
done
export MEDDDPM_TUNE_CACHE=/tmp/fresh-shipped HOME=/tmp/home-a
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-bench.txt &
smi=$!
timeout 200 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 190 > $w/bench-bf16.log 2>&1
echo "bench rc=$? peak $(sort -n $w/smi-bench.txt | tail -1) MiB"; kill $smi
grep -E "median|first|GPU per|peak|in use|replay" $w/bench-bf16.log | cut -c1-300
timeout 150 /tmp/medddpm bench --backends cuda --precisions tf32 --layouts ndhwc --conv-engine cudnn \
  --warmup 2 --steps 5 --out $w/bench-tf32 --timeout 140 > $w/bench-tf32.log 2>&1
echo "tf32 bench rc=$?"; grep -E "^tuning|median|first" $w/bench-tf32.log | cut -c1-300
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in eager graphs; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-train-$mode.txt &
  smi=$!
  timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn $flag > $w/train-$mode.log 2>&1
  echo "train $mode rc=$? peak $(sort -n $w/smi-train-$mode.txt | tail -1) MiB"; kill $smi
  grep -E "CUDA graphs|rror" $w/train-$mode.log | cut -c1-300
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl
  python3 - $w/metrics-$mode.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; final loss {m[-1]['loss']!r}")
EOF2
done
python3 - $w/metrics-graphs.jsonl $w/metrics-eager.jsonl <<'EOF2'
import json, sys
a = [json.loads(l)['loss'] for l in open(sys.argv[1])]
b = [json.loads(l)['loss'] for l in open(sys.argv[2])]
print(f"train losses equal in {sum(x == y for x, y in zip(a, b))} of {len(a)} steps (graphs vs eager)")
EOF2
rm -rf $w/run-*; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c1
MEDDDPM_TUNE_CACHE=/tmp/fresh-shipped; pack_tune_cache $out
