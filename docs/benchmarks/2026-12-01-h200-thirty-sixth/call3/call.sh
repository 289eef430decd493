#!/usr/bin/env bash
# Thirty-sixth session, call 3 (call 2's machine, still held), the release build of 497f293:
# is call 2's bf16 peak (11.8-12.0 GiB, against call 1's 10.4 with the same trim) the carried
# tuning cache's doing? The bf16 bench with a fresh cache (the binary's shipped choices), with
# the cache carried from call 1 (as in call 2), then fresh again.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w
bench() {  # name cache
  local name=$1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt & local smi=$!
  MEDDDPM_TUNE_CACHE=$2 timeout 90 /tmp/medddpm bench --backends cuda --layouts ndhwc --precisions bf16 --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$name --timeout 85 > $w/bench-$name.log 2>&1
  local rc=$?; kill $smi
  echo "bench $name (cache $2) rc=$rc whole-GPU peak $(sort -n $w/smi-$name.txt | tail -1) MiB ($SECONDS s)"
  grep -E "step median" $w/bench-$name.log | cut -c1-220
  grep -A2 "in use | reserved" $w/bench-$name.log | tail -1
}
bench fresh-a /tmp/fresh-a
bench carried /tmp/tune
bench fresh-b /tmp/fresh-b
rm -rf $w/bench-*/*.png
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
