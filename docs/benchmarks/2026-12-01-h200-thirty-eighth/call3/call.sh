#!/usr/bin/env bash
# Thirty-eighth session, call 3 (one H200): a measurement build (cd17f98 with
# measurement-build.patch beside this file, never committed) in which
# MEDDDPM_MEASURE_TF32_PLANS=1 runs TF32 convolutions through cuDNN's graph API (execution plans
# timed per shape, as bf16 runs) instead of its legacy functions. check-kernels TF32 with the
# plans (their results within TF32's tolerance), then the TF32 bench interleaved: legacy, plans
# (first run: the plans searched), plans, legacy.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
t0=$SECONDS
MEDDDPM_MEASURE_TF32_PLANS=1 timeout 200 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision tf32 --out $w/check-kernels-tf32-plans.json > $w/check-kernels-tf32-plans.log 2>&1
echo "check-kernels cudnn tf32 plans rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $w/check-kernels-tf32-plans.log | tail -1 | cut -c1-200)"
grep -i "graph API" $w/check-kernels-tf32-plans.log | head -3
bench() {  # name limit plans(0/1) args...
  local name=$1 limit=$2 plans=$3; shift 3
  if [ $SECONDS -gt $((575 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt & local smi=$!
  if [ $plans = 1 ]; then export MEDDDPM_MEASURE_TF32_PLANS=1; else unset MEDDDPM_MEASURE_TF32_PLANS; fi
  timeout $limit /tmp/medddpm bench --backends cuda --layouts ndhwc --warmup 3 --steps 10 --out $w/bench-$name \
    --timeout $((limit - 5)) "$@" > $w/bench-$name.log 2>&1
  local rc=$?; kill $smi; unset MEDDDPM_MEASURE_TF32_PLANS
  echo "bench $name rc=$rc whole-GPU peak $(sort -n $w/smi-$name.txt | tail -1) MiB ($SECONDS s)"
  grep -E "step median|first .* took" $w/bench-$name.log | cut -c1-200
  grep -E "GPU per training|training breakdown:" $w/bench-$name.log | cut -c1-260
  grep -i "graph API" $w/bench-$name.log | head -2
}
bench tf32-legacy-a 80 0 --precisions tf32 --conv-engine cudnn
bench tf32-plans-a 150 1 --precisions tf32 --conv-engine cudnn
bench tf32-plans-b 80 1 --precisions tf32 --conv-engine cudnn
bench tf32-legacy-b 80 0 --precisions tf32 --conv-engine cudnn
rm -f $w/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
