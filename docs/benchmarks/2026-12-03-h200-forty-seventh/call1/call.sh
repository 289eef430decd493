#!/usr/bin/env bash
# Call 1 (one H200): (1) cuDNN's TF32 weight gradients through PyTorch, plain and with the
# volume's depth in slabs (groups or batch of a convolution): do more independent products help?
# (2) A fresh machine's first steps on the carried binary (shipped-kernel lookup built in, its
# archive still empty, so everything is compiled as before), with MEDDDPM_EXPORT_KERNELS
# writing every compiled kernel's CUBIN: bench bf16 (cuDNN) from an empty cache, then a short
# `train` and `sample` on that cache (the kernels they add), then the bench again (warm).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; cupti_library
W=/tmp/c1; rm -rf $W; mkdir -p $W
machine_info $W
timeout 150 python3 scripts/torch-wgrad-slabs.py > $W/wgrad-slabs.jsonl 2> $W/wgrad-slabs.log
echo "wgrad slabs rc=$? ($SECONDS s)"; cut -c1-230 $W/wgrad-slabs.jsonl; tail -3 $W/wgrad-slabs.log
export MEDDDPM_TUNE_CACHE=/tmp/fresh MEDDDPM_EXPORT_KERNELS=/tmp/cubins
first() {  # first NAME LIMIT
  local smi; smi=$(poll_memory "$W/smi-$1.txt" 0)
  timeout $2 /tmp/medddpm-new bench --backends cuda --warmup 1 --steps 3 --out $W/bench-$1 \
    --timeout $(($2 - 5)) --precisions bf16 --layouts ndhwc --conv-engine cudnn > $W/bench-$1.log 2>&1
  echo "bench $1 rc=$? peak $(peak_mib $W/smi-$1.txt) MiB ($SECONDS s)"; kill $smi
  grep -E "step median|kernels:" $W/bench-$1.log | cut -c1-200
  python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); print('  first train step', r.get('first_train_step_s'), 's, first sampling step', r.get('first_sample_step_s'), 's')" $W/bench-$1/results.jsonl
  rm -f $W/bench-$1/*.png
}
first fresh 200
echo "exported $(ls /tmp/cubins | wc -l) CUBINs, $(du -sh /tmp/cubins | cut -f1)"
train_toml 3 > $W/train.toml
timeout 150 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? ($SECONDS s)"; grep -E "kernels:" $W/train.log; tail -2 $W/train.log | cut -c1-200
mask=$(find /tmp/phantoms128 -name '*.nii*' | grep -i mask | head -1)
timeout 90 /tmp/medddpm-new sample --checkpoint $W/run --masks $mask --out $W/samples --sampler ddim \
  --steps 3 --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/sample.log 2>&1
echo "sample rc=$? ($SECONDS s) mask $mask"; grep -E "kernels:" $W/sample.log; tail -2 $W/sample.log | cut -c1-200
echo "exported $(ls /tmp/cubins | wc -l) CUBINs, $(du -sh /tmp/cubins | cut -f1)"
first warm 60
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
cp $W/run/metrics.jsonl $W/train-metrics.jsonl 2>/dev/null
rm -rf $W/run $W/samples
tar czf $out/cubins.tgz -C /tmp cubins
tar czf $out/logs.tgz -C /tmp c1
pack_tune_cache $out
echo "total $SECONDS s"
