#!/usr/bin/env bash
# Twenty-seventh session, call 3 (nvidia-h200-x2; call 2's binary): two-GPU data-parallel
# scaling (`bench --devices 0,1` through scripts/gpu-scaling.sh: one volume per GPU, 3 + 10
# optimizer steps per device count), then `medddpm train` on GPU 0 with the GPU traced over 10
# optimizer steps (`--gpu-trace 10`), as it comes and with CUDA graphs, to see where the GPU
# waits inside an optimizer step.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
TOTAL=300 bash scripts/gpu-scaling.sh $out/x2 "wh-bf16:whole-head:128:bf16:240:0,1" 2>&1 | tail -4
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c3; mkdir -p $w
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in graphs eager; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  CUDA_VISIBLE_DEVICES=0 timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn --gpu-trace 10 $flag > $w/train-$mode.log 2>&1
  echo "train $mode rc=$?"
  grep -E "CUDA graphs|rror|GPU" $w/train-$mode.log | cut -c1-1500
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl; cp $w/run-$mode/gpu-trace.json $w/gpu-trace-$mode.json
  python3 - $w/metrics-$mode.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; final loss {m[-1]['loss']!r}")
EOF2
done
rm -rf $w/run-*
tar czf $out/logs.tgz -C /tmp c3
