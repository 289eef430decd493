#!/usr/bin/env bash
# Thirty-ninth session, call 5 (one H200), the release build of 68b6f5d (.device-bin/medddpm-b.xz,
# this session's final engine and trainer): issue 36's two targets not run in calls 1-4, each
# with the GPU trace's host side: TF32 training (<= 120 ms) with cuDNN, and bf16 with our
# portable CubeCL convolutions (<= 110 ms), channels-last.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
xz -t .device-bin/medddpm-b.xz || { echo "carried binary is damaged"; exit 3; }
xz -dc .device-bin/medddpm-b.xz > /tmp/medddpm && chmod +x /tmp/medddpm
cublas_library; tune_cache; cupti_library
W=/tmp/c5; mkdir -p $W
machine_info $W
bench_run tf32 150 --precisions tf32 --layouts ndhwc --conv-engine cudnn
grep -E "host per training" $W/bench-tf32.log | cut -c1-300
bench_run cubecl 280 --precisions bf16 --layouts ndhwc --conv-engine cubecl
grep -E "host per training|GPU per training" $W/bench-cubecl.log | cut -c1-400
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c5
echo "total $SECONDS s"
