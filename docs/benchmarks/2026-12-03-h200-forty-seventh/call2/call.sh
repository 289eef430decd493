#!/usr/bin/env bash
# Call 2 (one H200): the binary with call 1's 317 CUBINs shipped (.device-bin/binary-commit.txt).
# A fresh machine's first steps: bench bf16 (cuDNN) from an empty cache, then again (warm); a
# short `train` and `sample` from another empty cache. Then cuDNN's plain TF32 weight gradients
# in both layouts through PyTorch (call 1's probe ran out of time before channels-first), and our
# TF32 step in both layouts (the tuning cache of call 1's fresh run, TF32 searched and compiled).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; cupti_library
W=/tmp/c2; rm -rf $W; mkdir -p $W
machine_info $W
first() {  # first NAME LIMIT
  local smi; smi=$(poll_memory "$W/smi-$1.txt" 0)
  timeout $2 /tmp/medddpm-new bench --backends cuda --warmup 1 --steps 3 --out $W/bench-$1 \
    --timeout $(($2 - 5)) --precisions bf16 --layouts ndhwc --conv-engine cudnn > $W/bench-$1.log 2>&1
  echo "bench $1 rc=$? peak $(peak_mib $W/smi-$1.txt) MiB ($SECONDS s)"; kill $smi
  grep -E "step median|kernels:|step took|step, host threads" $W/bench-$1.log | cut -c1-330
  rm -f $W/bench-$1/*.png
}
MEDDDPM_TUNE_CACHE=/tmp/fresh first fresh 150
MEDDDPM_TUNE_CACHE=/tmp/fresh first warm 60
export MEDDDPM_TUNE_CACHE=/tmp/fresh-train
train_toml 3 > $W/train.toml
s0=$SECONDS
timeout 150 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? ($((SECONDS - s0)) s in all, $SECONDS s)"; grep -E "kernels:" $W/train.log; tail -2 $W/train.log | cut -c1-200
python3 -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1])]; print('  elapsed_s per step', [round(x['elapsed_s'],2) for x in m])" $W/run/metrics.jsonl
mask=$(find /tmp/phantoms128 -name '*.nii*' | grep -i mask | head -1)
s0=$SECONDS
timeout 90 /tmp/medddpm-new sample --checkpoint $W/run --masks $mask --out $W/samples --sampler ddim \
  --steps 3 --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/sample.log 2>&1
echo "sample rc=$? ($((SECONDS - s0)) s in all, $SECONDS s)"; grep -E "kernels:" $W/sample.log; tail -2 $W/sample.log | cut -c1-200
cp $W/run/metrics.jsonl $W/train-metrics.jsonl 2>/dev/null
rm -rf $W/run $W/samples
timeout 100 python3 scripts/torch-wgrad-slabs.py --slabs "" > $W/wgrad-plain.jsonl 2> $W/wgrad-plain.log
echo "wgrad plain rc=$? ($SECONDS s)"; cut -c1-200 $W/wgrad-plain.jsonl; tail -2 $W/wgrad-plain.log
export MEDDDPM_TUNE_CACHE=/tmp/fresh
BIN=/tmp/medddpm-new bench_run tf32-ncdhw 130 --precisions tf32 --layouts ncdhw --conv-engine cudnn
bench_summary tf32-ncdhw
BIN=/tmp/medddpm-new bench_run tf32-ndhwc 100 --precisions tf32 --layouts ndhwc --conv-engine cudnn
bench_summary tf32-ndhwc
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
