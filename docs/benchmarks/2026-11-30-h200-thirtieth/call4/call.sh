#!/usr/bin/env bash
# Thirtieth session, call 3: the CUDA memory pool's bucket count swept (a measurement build of
# 0814bf9 whose pool is cubecl's bucketed pool with MEDDDPM_POOL_BUCKETS buckets; 24 is cubecl's
# own ExclusivePages), the bf16 bench without graphs each time (its peak is the steps as they
# come), beside the previous session's binary (cubecl's ExclusivePages) as the control.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
xz -dc .device-bin/medddpm-prev.xz > /tmp/medddpm-old && chmod +x /tmp/medddpm-old
for run in 20 22 23 25 26 28 24c; do
  bin=/tmp/medddpm; case $run in prev*) bin=/tmp/medddpm-old;; esac
  n=${run%[bc]}; export MEDDDPM_POOL_BUCKETS=$n
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$run.txt &
  smi=$!
  timeout 150 $bin bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$run --timeout 140 > $w/bench-$run.log 2>&1
  rc=$?; kill $smi
  echo "bench $run rc=$rc whole-GPU peak $(sort -n $w/smi-bench-$run.txt | tail -1) MiB; $(grep -E '^\| cuda' $w/bench-$run.log | sed -n '1p;6p' | awk -F'|' '{printf "%s |", $0}' | cut -c1-260)"
done
unset MEDDDPM_POOL_BUCKETS
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c4
