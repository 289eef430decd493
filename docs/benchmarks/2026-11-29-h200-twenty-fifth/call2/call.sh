#!/usr/bin/env bash
# Twenty-fifth session, call 2 (the build to commit): check-kernels in fp32, then the engine
# call's parts (bf16 bench twice, TF32, check-kernels bf16, medddpm train with and without the
# data cache, medddpm sample, torch.compile default and reduce-overhead).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
mkdir -p /tmp/c2
timeout 200 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision fp32 > /tmp/c2/check-kernels-fp32.log 2>&1
echo "check-kernels fp32 rc=$?"; grep -iE "shifted|within" /tmp/c2/check-kernels-fp32.log | tail -8 | cut -c1-300
bash scripts/gpu-engine-call.sh "$out" "bench bench2 tf32 check train sample torch torch2"
cp /tmp/c2/check-kernels-fp32.log "$out/"
