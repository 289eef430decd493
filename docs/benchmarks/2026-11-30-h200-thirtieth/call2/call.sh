#!/usr/bin/env bash
# Thirtieth session, call 2 (same machine and binary as call 1): check-kernels with our CubeCL
# convolutions (bf16; after the portable kernels' host code was deduplicated) and the bf16 bench
# with CUDA graphs; the tuning cache packed to bring back.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c2; mkdir -p $w
timeout 240 /tmp/medddpm check-kernels --backend cuda --conv-engine cubecl --precision bf16 > $w/check-kernels-cubecl.log 2>&1
echo "check-kernels cubecl bf16 rc=$?"; grep -vE "^\[tune\]" $w/check-kernels-cubecl.log | tail -2 | cut -c1-300
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench-graphs --timeout 140 > $w/bench-graphs.log 2>&1
echo "bench graphs rc=$?"; grep -E "median|convolutions:" $w/bench-graphs.log | head -6 | cut -c1-220
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c2
pack_tune_cache $out
