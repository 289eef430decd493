#!/usr/bin/env bash
# Call 1 (one H200): the release build of this session's code (new, the commit in
# .device-bin/binary-commit.txt: the decoder's GroupNorm of two parts reads each part where it
# lies and writes the joined output, and its backward writes each part's gradient, so neither
# the join of the normalised parts nor the split of their gradient is made) against a4b5e69
# (base, the forty-third session's call 1 build): check-kernels bf16 with cuDNN and with our
# CubeCL convolutions (the GroupNorm rows now with inputs in two parts), the bf16 bench
# interleaved new/base (GPU busy, launches, peak, loss), `medddpm train` (released whole-head
# settings, 12 steps) with both and `medddpm sample` with new, and the PyTorch reference under
# torch.compile (default mode, tuned; .device-peer, run and not copied) in the same call.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new base; tune_cache; cupti_library
W=/tmp/c1; mkdir -p $W
machine_info $W
for engine in cudnn cubecl; do
  t0=$SECONDS
  timeout 150 /tmp/medddpm-new check-kernels --backend cuda --conv-engine $engine --precision bf16 \
    --out $W/check-kernels-$engine.json > $W/check-kernels-$engine.log 2>&1
  echo "check-kernels $engine bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-$engine.log | tail -1 | cut -c1-200)"
done
grep -E "parts" $W/check-kernels-cudnn.log | cut -c1-220
runs="new-1 base-1 new-2 base-2 new-3 base-3"
for run in $runs; do
  BIN=/tmp/medddpm-${run%-*} bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  grep -E "^\| cuda\+cudnn/bf16/ndhwc \| (training micro-step|sampling step)" $W/bench-$run.log | cut -c1-120
  grep -iE "loss" $W/bench-$run.log | tail -1 | cut -c1-160
done
train_toml 12 > $W/train.toml
for build in new base; do
  smi=$(poll_memory $W/smi-train-$build.txt 0)
  timeout 80 /tmp/medddpm-$build train --experiment $W/train.toml --run-dir $W/run-$build --backend cuda \
    --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train-$build.log 2>&1
  echo "train $build rc=$? whole-GPU peak $(peak_mib $W/smi-train-$build.txt) MiB ($SECONDS s)"; kill $smi
  train_summary $W/run-$build/metrics.jsonl
  cp $W/run-$build/metrics.jsonl $W/train-metrics-$build.jsonl
done
mkdir -p $W/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $W/masks/
smi=$(poll_memory $W/smi-sample.txt 0)
t0=$SECONDS
timeout 60 /tmp/medddpm-new sample --checkpoint $W/run-new --masks $W/masks --out $W/samples \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $W/sample.log 2>&1
echo "sample rc=$? wall $((SECONDS - t0)) s, whole-GPU peak $(peak_mib $W/smi-sample.txt) MiB"; kill $smi
tail -1 $W/sample.log | cut -c1-300
if [ $SECONDS -lt 345 ]; then torch_compile_run 230; else echo "torch.compile skipped ($SECONDS s)"; fi
rm -rf $W/run-*/checkpoints $W/samples
# At most a few files come back: the logs, the results and the metrics in one archive.
for run in $runs; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
cp $W/check-kernels-cudnn.json $W/torch-compile1.json $W/train-metrics-new.jsonl $out/ 2>/dev/null
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
