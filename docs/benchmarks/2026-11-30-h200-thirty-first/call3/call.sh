#!/usr/bin/env bash
# Thirty-first session, call 3 (one H200): `medddpm plan` on the GPU (the device's memory read
# from the driver), a run far beyond it refused before it starts, then what users run beside
# the plan: `medddpm train` (whole-head 128^3 phantoms, bf16, released settings: batch 1,
# accumulation 2, EMA) and `medddpm sample` from its checkpoint, each with an nvidia-smi trace
# (memory.used every 100 ms); and strict FP32's bench twice (call 2's only run searched cuDNN's
# algorithms in its first step). Binary: this session's release build with the plan.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
/tmp/medddpm plan whole-head-128 --device cuda:0 --precision bf16 > $w/plan-whole-head-bf16.txt 2>&1
echo "plan whole-head bf16 rc=$?"; cat $w/plan-whole-head-bf16.txt | cut -c1-200
/tmp/medddpm plan brats-192 --device cuda:0 > $w/plan-brats.txt 2>&1; echo "plan brats rc=$?"; head -1 $w/plan-brats.txt | cut -c1-250; tail -1 $w/plan-brats.txt | cut -c1-250
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e 's|^steps = .*|steps = 10|' -e 's|^save_every = .*|save_every = 10|' \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
sed -e 's|^batch_size = .*|batch_size = 64|' $w/train.toml > $w/train-b64.toml
grep -q "batch_size = 64" $w/train-b64.toml || echo "batch_size not set"
s=$(date +%s.%N)
/tmp/medddpm train --experiment $w/train-b64.toml --run-dir $w/run-b64 --backend cuda --precision bf16 > $w/train-b64.log 2>&1
echo "train batch 64 rc=$? in $(echo "$(date +%s.%N) - $s" | bc) s; run folder made: $([ -e $w/run-b64 ] && echo yes || echo no)"
tail -1 $w/train-b64.log | cut -c1-400
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-train.txt &
smi=$!
timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/train.log 2>&1
echo "train rc=$? whole-GPU peak $(sort -n $w/smi-train.txt | tail -1) MiB (before: $(head -1 $w/smi-train.txt))"; kill $smi
grep -vE "^\[tune\]|^ *[0-9]+%|step " $w/train.log | tail -3 | cut -c1-250
mkdir -p $w/masks; cp /tmp/phantoms128/mask/$(ls /tmp/phantoms128/mask | head -1) $w/masks/
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-sample.txt &
smi=$!
timeout 120 /tmp/medddpm sample --checkpoint $w/run --masks $w/masks --out $w/samples --sampler dpm-solver++ --steps 25 \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $w/sample.log 2>&1
echo "sample rc=$? whole-GPU peak $(sort -n $w/smi-sample.txt | tail -1) MiB (before: $(head -1 $w/smi-sample.txt))"; kill $smi
tail -2 $w/sample.log | cut -c1-250
for run in 1 2; do
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-fp32-$run.txt &
  smi=$!
  timeout 100 /tmp/medddpm bench --backends cuda --precisions fp32 --layouts ndhwc --conv-engine cudnn \
    --warmup 1 --steps 3 --no-breakdown --out $w/bench-fp32-$run --timeout 95 > $w/bench-fp32-$run.log 2>&1
  echo "bench fp32 run $run rc=$? whole-GPU peak $(sort -n $w/smi-fp32-$run.txt | tail -1) MiB; $(grep -c '\[tune\]' $w/bench-fp32-$run.log) tuned; $(grep -o 'first training micro-step took [0-9.]* s' $w/bench-fp32-$run.log)"
  kill $smi
done
rm -rf $w/run $w/run-b64 $w/samples; find $w -name results.png -delete
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c3
