#!/usr/bin/env bash
# Twenty-fifth session, call 6 (the committed code after the review): check-kernels bf16 and
# fp32, then the bf16 bench twice (10 timed steps) and medddpm train once.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c6; mkdir -p $w
for p in bf16 fp32; do
  timeout 200 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision $p > $w/check-kernels-$p.log 2>&1
  echo "check-kernels $p rc=$?: $(tail -1 $w/check-kernels-$p.log | cut -c1-200)"
done
for i in 1 2; do
  /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench$i --timeout 200 > $w/bench$i-bf16.log 2>&1
  echo "bench $i rc=$?"; grep -E "median|GPU per" $w/bench$i-bf16.log | cut -c1-260
done
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
/tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/train.log 2>&1
echo "train rc=$?"; cp $w/run/metrics.jsonl $w/metrics.jsonl
python3 - $w/metrics.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; final loss {m[-1]['loss']}")
EOF2
rm -rf $w/run; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c6
