#!/usr/bin/env bash
# Thirty-second session, call 2 (two H200s; the bench on GPU 0): the code after this session's
# issue-37 deduplication (portable kernels' `#[cube]` bodies and launch code, the kernels'
# autodiff nodes, NCCL's packed all-reduce, the CLI and bench helpers, the trainer's and the
# other crates' helpers) and issue 39's launcher environment: check-kernels with cuDNN and with
# our CubeCL convolutions (bf16), NCCL's known-answer check on devices 0,1, the bf16 bench with
# this binary and the one before this session's merges (d33ab1d, call 1's) alternating
# (new, old, new).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c2; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
timeout 100 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 > $w/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$?"; grep -vE "^\[tune\]" $w/check-kernels-cudnn.log | tail -1 | cut -c1-300
timeout 120 /tmp/medddpm check-kernels --backend cuda --conv-engine cubecl --precision bf16 > $w/check-kernels-cubecl.log 2>&1
echo "check-kernels cubecl bf16 rc=$?"; grep -vE "^\[tune\]" $w/check-kernels-cubecl.log | tail -1 | cut -c1-300
timeout 60 /tmp/medddpm check-kernels --backend cuda --precision bf16 --collective-devices 0,1 > $w/check-collective.log 2>&1
echo "check-kernels collective rc=$?"; grep -vE "^\[tune\]" $w/check-collective.log | tail -1 | cut -c1-300
xz -dc .device-bin/medddpm-prev.xz > /tmp/medddpm-old && chmod +x /tmp/medddpm-old
for b in new old new2; do
  bin=/tmp/medddpm; case $b in old*) bin=/tmp/medddpm-old ;; esac
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$b.txt &
  smi=$!
  timeout 85 $bin bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$b --timeout 80 > $w/bench-$b.log 2>&1
  echo "bench $b rc=$? whole-GPU peak $(sort -n $w/smi-bench-$b.txt | tail -1) MiB"; kill $smi
  grep -E "median" $w/bench-$b.log | head -3 | cut -c1-200
done
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c2
pack_tune_cache $out; rm -f $out/compiled.txz
