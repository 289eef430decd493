#!/usr/bin/env bash
# Twenty-fifth session, call 3 (nvidia-h200, call 2's build): the bf16 bench (a third sample of
# the step times) and our CubeCL convolutions' bf16 bench. (Two-GPU scaling was planned on
# nvidia-h200-x2, which was not lent.)
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
mkdir -p /tmp/c3
CUDA_VISIBLE_DEVICES=0 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --out /tmp/c3/bench --timeout 200 > /tmp/c3/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|GPU per" /tmp/c3/bench-bf16.log | cut -c1-300
CUDA_VISIBLE_DEVICES=0 timeout 200 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl \
  --warmup 3 --steps 10 --out /tmp/c3/cubecl --timeout 190 > /tmp/c3/cubecl-bf16.log 2>&1
echo "cubecl rc=$?"; grep -E "median|GPU per|first" /tmp/c3/cubecl-bf16.log | cut -c1-300
find /tmp/c3 -name results.png -delete
tar czf "$out/logs.tgz" -C /tmp c3
