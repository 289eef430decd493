#!/usr/bin/env bash
# Twenty-ninth session, call 3: after issue 37's restructuring (the engine's modules in layers,
# the experiment switches deleted): check-kernels (bf16 and tf32, cuDNN engine; bf16 with our
# CubeCL convolutions), the bf16 bench with CUDA graphs, the CubeCL engine's bench, and
# medddpm train (20 steps, as it comes and with graphs), against calls 1-2 of the same session.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
for p in bf16 tf32; do
  timeout 120 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision $p > $w/check-kernels-$p.log 2>&1
  echo "check-kernels cudnn $p rc=$?"; tail -2 $w/check-kernels-$p.log | cut -c1-300
done
timeout 120 /tmp/medddpm check-kernels --backend cuda --conv-engine cubecl --precision bf16 > $w/check-kernels-cubecl.log 2>&1
echo "check-kernels cubecl bf16 rc=$?"; tail -2 $w/check-kernels-cubecl.log | cut -c1-300
timeout 200 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 190 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|first .*took" $w/bench-bf16.log | cut -c1-220
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl \
  --warmup 2 --steps 5 --out $w/bench-cubecl --timeout 140 > $w/bench-cubecl.log 2>&1
echo "bench cubecl rc=$?"; grep -E "median|first .*took" $w/bench-cubecl.log | cut -c1-220
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 20|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in eager graphs; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  timeout 120 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn $flag > $w/train-$mode.log 2>&1
  echo "train $mode rc=$?"; grep -E "CUDA graphs|rror" $w/train-$mode.log | cut -c1-300
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl
  python3 - $w/metrics-$mode.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms; final loss {m[-1]['loss']!r}")
EOF2
done
python3 - $w/metrics-graphs.jsonl $w/metrics-eager.jsonl <<'EOF2'
import json, sys
a = [json.loads(l)['loss'] for l in open(sys.argv[1])]
b = [json.loads(l)['loss'] for l in open(sys.argv[2])]
print(f"train losses equal in {sum(x == y for x, y in zip(a, b))} of {len(a)} steps (graphs vs eager)")
EOF2
rm -rf $w/run-*; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c3
pack_tune_cache $out
