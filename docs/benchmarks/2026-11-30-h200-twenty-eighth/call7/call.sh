#!/usr/bin/env bash
# Twenty-eighth session, call 7 (an experiment build: 572bc01's code plus MEDDDPM_NVRTC_PCH=1
# adding NVRTC's automatic precompiled header): first steps on a fresh machine (empty cache
# folder, empty HOME), with and without the precompiled header (in that order: the second run finds the libraries in the page cache).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary
w=/tmp/c7; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
for mode in pch plain; do
  mkdir -p /tmp/home-$mode
  pch=0; [ $mode = pch ] && pch=1
  MEDDDPM_NVRTC_PCH=$pch HOME=/tmp/home-$mode MEDDDPM_TUNE_CACHE=/tmp/fresh-$mode timeout 150 /tmp/medddpm bench \
    --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --warmup 1 --steps 3 \
    --out $w/fresh-$mode --timeout 140 > $w/bench-fresh-$mode.log 2>&1
  echo "fresh $mode rc=$?"; grep -E "first .*(took|threads)|median|rror" $w/bench-fresh-$mode.log | cut -c1-300
  (cd /tmp/fresh-$mode && du -sh */cuda */cuda-driver-jit 2>&1)
done
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c7
