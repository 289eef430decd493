#!/usr/bin/env bash
# usage: .call2.sh NAME "cells" ; cell = prec:mode[:timeout]
set -u
name=$1; cells=$2
out=$OUT/$name; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune
if [ ! -d /tmp/tune ]; then mkdir -p /tmp/tune; tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; uptime; } > $out/machine.txt
if [ ! -x /tmp/ma ]; then xz -t .device-bin/medddpm-async.xz || exit 3; xz -dc .device-bin/medddpm-async.xz > /tmp/ma && chmod +x /tmp/ma; fi
if [ -n "${CHECK:-}" ]; then
  timeout 200 /tmp/ma check-kernels --backend cuda --conv-engine cudnn --precision bf16 --scale 4 \
    --out $out/check-kernels-bf16.json > $out/check-kernels-bf16.log 2>&1
  echo "check-kernels exit $?: $(grep -c ' ok$' $out/check-kernels-bf16.log) ok"; grep -E "OUTSIDE|fail|error" $out/check-kernels-bf16.log | head -5
fi
for c in $cells; do
  p=${c%%:*}; rest=${c#*:}; mode=${rest%%:*}; to=${rest#*:}; [ "$to" = "$rest" ] && to=110
  echo "== $mode $p" >> $out/ab.log
  if [ $mode = sync ]; then export MEDDDPM_CUDNN_SYNC=1; else unset MEDDDPM_CUDNN_SYNC; fi
  timeout $((to+5)) /tmp/ma bench --backends cuda --precisions $p --layouts ndhwc --conv-engine cudnn \
    --out /tmp/b-$mode-$p --tune-cache $MEDDDPM_TUNE_CACHE --timeout $to --size 128 --steps 10 --warmup 3 \
    --no-breakdown >> $out/ab.log 2>&1
  (echo "# $mode $p"; cat /tmp/b-$mode-$p/results.jsonl 2>/dev/null) >> $out/ab.jsonl
done
unset MEDDDPM_CUDNN_SYNC
grep -E "^== |BUSY (U|D execute|scoped wait \(caller U)|micro-step median|sampling step median|first .* took" $out/ab.log
tar czf $OUT/$name.tgz -C $OUT $name
