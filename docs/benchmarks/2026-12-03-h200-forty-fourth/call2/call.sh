#!/usr/bin/env bash
# Call 2 (one H200): the same two builds as call 1 (new: the decoder's GroupNorm of two parts
# without their join; base: a4b5e69), the bf16 bench with --cuda-graphs interleaved new/base
# (each step as it comes and replayed from a CUDA graph, checked value for value), and
# `medddpm train --cuda-graphs` (released whole-head settings, 12 steps) with new.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new base; tune_cache; cupti_library
W=/tmp/c2; mkdir -p $W
machine_info $W
runs="new-1 base-1 new-2 base-2"
for run in $runs; do
  BIN=/tmp/medddpm-${run%-*} bench_run $run 110 --precisions bf16 --layouts ndhwc --conv-engine cudnn --cuda-graphs
  grep -iE "graph|replay" $W/bench-$run.log | grep -v "^\[tune\]" | tail -6 | cut -c1-220
done
train_toml 12 > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 90 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 --cuda-graphs > $W/train.log 2>&1
echo "train graphs rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
train_summary $W/run/metrics.jsonl
rm -rf $W/run/checkpoints
for run in $runs; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
cp $W/run/metrics.jsonl $W/train-metrics.jsonl
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
