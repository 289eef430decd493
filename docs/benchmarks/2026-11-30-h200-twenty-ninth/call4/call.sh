#!/usr/bin/env bash
# Twenty-ninth session, call 4: the code after the crate split (medddpm-ops, medddpm-cube) and
# the module layering: the bf16 bench with CUDA graphs, check-kernels with cuDNN (bf16) and with
# our CubeCL convolutions (bf16; call 3's ran out of its 120 s while tuning the products).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 140 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|first .*took" $w/bench-bf16.log | cut -c1-220
timeout 90 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 > $w/check-kernels-bf16.log 2>&1
echo "check-kernels cudnn bf16 rc=$?"; tail -1 $w/check-kernels-bf16.log | cut -c1-300
timeout 280 /tmp/medddpm check-kernels --backend cuda --conv-engine cubecl --precision bf16 > $w/check-kernels-cubecl.log 2>&1
echo "check-kernels cubecl bf16 rc=$?"; grep -vE "^\[tune\]" $w/check-kernels-cubecl.log | tail -3 | cut -c1-300
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c4
