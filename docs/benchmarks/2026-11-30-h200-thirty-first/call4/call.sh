#!/usr/bin/env bash
# Thirty-first session, call 4 (one H200): `medddpm sample`'s peak memory beside the plan's
# sampling estimate (call 3: one measurement, 29 % above the plan): whole-head 128^3 in bf16
# again, TF32 and strict FP32 from the same checkpoint, and a C = 32 network in bf16 and TF32;
# each `sample` run with its own nvidia-smi trace (memory.used every 100 ms), DPM-Solver++ 10
# steps, one mask. The checkpoints come from 2-step `medddpm train` runs on 128^3 phantoms.
# Binary: this session's release build (call 3's).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 2, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e 's|^steps = .*|steps = 2|' -e 's|^save_every = .*|save_every = 2|' \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
sed -e 's|^model_channels = .*|model_channels = 32|' $w/train.toml > $w/train-c32.toml
grep -q "model_channels = 32" $w/train-c32.toml || echo "model_channels not set"
for m in c64 c32; do
  toml=$w/train.toml; [ $m = c32 ] && toml=$w/train-c32.toml
  timeout 100 /tmp/medddpm train --experiment $toml --run-dir $w/run-$m --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn > $w/train-$m.log 2>&1
  echo "train $m rc=$?"; tail -1 $w/train-$m.log | cut -c1-200
done
mkdir -p $w/masks; cp /tmp/phantoms128/mask/$(ls /tmp/phantoms128/mask | head -1) $w/masks/
for case in c64-bf16 c64-tf32 c64-fp32 c32-bf16 c32-tf32; do
  m=${case%-*}; p=${case#*-}
  /tmp/medddpm plan $w/run-$m --device cuda:0 --precision $p --json > $w/plan-$case.json 2>&1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-sample-$case.txt &
  smi=$!
  timeout 100 /tmp/medddpm sample --checkpoint $w/run-$m --masks $w/masks --out $w/samples-$case --sampler dpm-solver++ \
    --steps 10 --backend cuda --precision $p --layout ndhwc --conv-engine cudnn > $w/sample-$case.log 2>&1
  rc=$?; kill $smi
  echo "sample $case rc=$rc whole-GPU peak $(sort -n $w/smi-sample-$case.txt | tail -1) MiB (before: $(head -1 $w/smi-sample-$case.txt)); plan $(python3 -c "import json; print(round(json.load(open('$w/plan-$case.json'))['sampling_bytes']/2**20))") MiB"
done
rm -rf $w/run-* $w/samples-* $w/masks
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c4
