#!/usr/bin/env bash
# Twenty-eighth session, call 5 (the binary of call 4, 572bc01): a fresh machine with only the
# caches call 4 brought back (tuning results, PTX and the CUDA driver's machine code): the
# bench's first steps, then medddpm train (40 steps) timed from its metrics.jsonl, its own first
# step read from the log's elapsed times.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c5; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
timeout 100 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 1 --steps 3 --out $w/first --timeout 90 > $w/bench-first.log 2>&1
echo "bench rc=$?"; grep -E "first .*(took|threads)|median" $w/bench-first.log | cut -c1-300
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-train.txt &
smi=$!
timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/train.log 2>&1
echo "train rc=$? peak $(sort -n $w/smi-train.txt | tail -1) MiB"; kill $smi
cp $w/run/metrics.jsonl $w/metrics.jsonl
python3 - $w/metrics.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  first logged step {m[0]['step']} at {m[0]['elapsed_s']:.2f} s; optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; final loss {m[-1]['loss']!r}")
EOF2
rm -rf $w/run; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c5
