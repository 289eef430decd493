#!/usr/bin/env bash
set -u
out=$OUT/c4; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; tar xzf .device-cache/tune-cache.tgz -C /tmp/tune
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $out/machine.txt
xz -t .device-bin/medddpm-final.xz || exit 3; xz -dc .device-bin/medddpm-final.xz > /tmp/mf && chmod +x /tmp/mf
for p in bf16 tf32 bf16; do
  timeout 205 /tmp/mf bench --backends cuda --precisions $p --layouts ndhwc --conv-engine cudnn \
    --out $out/bench --tune-cache $MEDDDPM_TUNE_CACHE --timeout 200 --size 128 --steps 10 --warmup 3 \
    --no-breakdown >> $out/bench.log 2>&1
done
grep -E "micro-step median|per step:|sampling step median|first .* took" $out/bench.log
tail -n 3 $out/bench/results.jsonl | python3 -c "import sys,json; [print(json.loads(l)['train_threads_ms']) for l in sys.stdin]"
tar czf $OUT/c4.tgz -C $OUT c4
