#!/usr/bin/env bash
# Twenty-eighth session, call 6 (the binary of call 4, 572bc01): CUDA graphs with our portable
# CubeCL convolutions (--conv-engine cubecl): the bf16 bench with graphs (each replay checked
# value for value against the step as it comes), then medddpm train (20 steps) as it comes and
# with graphs, losses compared.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c6; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
timeout 240 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 230 > $w/bench-cubecl.log 2>&1
echo "bench rc=$?"; grep -E "median|first .* took|GPU per|graph" $w/bench-cubecl.log | cut -c1-300
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 20|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in eager graphs; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  timeout 120 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cubecl $flag > $w/train-$mode.log 2>&1
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
tar czf $out/logs.tgz -C /tmp c6
