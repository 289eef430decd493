#!/usr/bin/env bash
set -u
out=$OUT/c1; mkdir -p $out
export MEDDDPM_TUNE_CACHE=$PWD/.device-cache/tune; mkdir -p $MEDDDPM_TUNE_CACHE
tar xzf .device-cache/tune-cache.tgz -C $MEDDDPM_TUNE_CACHE
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $out/machine.txt
xz -t .device-bin/medddpm-busy.xz || exit 3
xz -dc .device-bin/medddpm-busy.xz > /tmp/mb && chmod +x /tmp/mb
for p in bf16 tf32 bf16 tf32; do
  echo "== busy $p" >> $out/busy.log
  timeout 120 /tmp/mb bench --backends cuda --precisions $p --layouts ndhwc --conv-engine cudnn \
    --out /tmp/b-$p --tune-cache $MEDDDPM_TUNE_CACHE --timeout 115 --size 128 --steps 10 --warmup 3 \
    --no-breakdown >> $out/busy.log 2>&1
done
grep -E "^== |BUSY|micro-step median|sampling step median" $out/busy.log
tar czf $OUT/c1.tgz -C $OUT c1
