#!/usr/bin/env bash
# Twenty-eighth session, call 1: batches copied from page-locked memory the loader's threads fill.
# The bf16 bench with CUDA graphs (caches: the committed tuning results, no compiled kernels),
# then medddpm train (40 steps) as it comes and with graphs (losses compared, peak memory from
# nvidia-smi), then train again with the GPU traced (gaps per optimizer step), then a short bench
# with every cache warm (first steps and where their host time went).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c1; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
timeout 200 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 190 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|first|GPU per|peak|in use" $w/bench-bf16.log | cut -c1-300
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in eager graphs traced; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"; [ $mode = traced ] && flag="--gpu-trace 10"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-train-$mode.txt &
  smi=$!
  timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn $flag > $w/train-$mode.log 2>&1
  echo "train $mode rc=$? peak $(sort -n $w/smi-train-$mode.txt | tail -1) MiB"; kill $smi
  grep -E "CUDA graphs|rror|GPU trace|gap" $w/train-$mode.log | cut -c1-300
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl
  cp $w/run-$mode/gpu-trace.json $w/gpu-trace-$mode.json 2>/dev/null
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
timeout 120 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 1 --steps 3 --out $w/bench-warm --timeout 110 > $w/bench-warm.log 2>&1
echo "warm bench rc=$?"; grep -E "first|median" $w/bench-warm.log | cut -c1-400
rm -rf $w/run-*; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c1
pack_tune_cache $out
