#!/usr/bin/env bash
# Thirty-eighth session, call 4 (one H200): a measurement build (03fb85e with
# measurement-build.patch beside this file, never committed) in which
# MEDDDPM_MEASURE_BUCKETS=quarter gives CUDA's memory pool buckets whose limits are 2^k x {1,
# 1.25, 1.5, 1.75} (a bucket per quarter octave, every whole-head activation size a limit)
# instead of cubecl's 24 buckets spread evenly in log size. The bf16 bench interleaved:
# default, quarter, quarter, default; whole-GPU peaks from nvidia-smi. Issue 36's peak target:
# 10 GiB (10,240 MiB) against 10,805.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
bench() {  # name limit buckets args...
  local name=$1 limit=$2 buckets=$3; shift 3
  if [ $SECONDS -gt $((575 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt & local smi=$!
  MEDDDPM_MEASURE_BUCKETS=$buckets timeout $limit /tmp/medddpm bench --backends cuda --layouts ndhwc --warmup 3 --steps 10 \
    --out $w/bench-$name --timeout $((limit - 5)) "$@" > $w/bench-$name.log 2>&1
  local rc=$?; kill $smi
  echo "bench $name rc=$rc whole-GPU peak $(sort -n $w/smi-$name.txt | tail -1) MiB ($SECONDS s)"
  grep -E "step median|measurement:" $w/bench-$name.log | cut -c1-200
  grep -A2 "in use | reserved" $w/bench-$name.log | tail -1
}
bench bf16-default-a 70 default --precisions bf16 --conv-engine cudnn
bench bf16-quarter-a 70 quarter --precisions bf16 --conv-engine cudnn
bench bf16-quarter-b 70 quarter --precisions bf16 --conv-engine cudnn
bench bf16-default-b 70 default --precisions bf16 --conv-engine cudnn
bench bf16-quarter-norms 70 quarter --precisions bf16 --conv-engine cudnn --activation-checkpointing norms
rm -f $w/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c4
echo "total $SECONDS s"
