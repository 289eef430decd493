#!/usr/bin/env bash
# Twenty-eighth session, call 8 (the committed code: NVRTC's precompiled header whenever NVRTC is
# 12.8 or later): first steps on a fresh machine (empty cache folder, empty HOME).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary
w=/tmp/c8; mkdir -p $w /tmp/home-fresh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
HOME=/tmp/home-fresh MEDDDPM_TUNE_CACHE=/tmp/fresh timeout 150 /tmp/medddpm bench \
  --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --warmup 1 --steps 3 \
  --out $w/fresh --timeout 140 > $w/bench-fresh.log 2>&1
echo "fresh rc=$?"; grep -E "first .*(took|threads)|median|rror" $w/bench-fresh.log | cut -c1-300
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c8
