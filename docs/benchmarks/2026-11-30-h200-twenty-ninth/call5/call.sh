#!/usr/bin/env bash
# Twenty-ninth session, call 5 (two H200s): the collective code after its move into
# medddpm-collective (e3e7b57): check-kernels' NCCL known-answer check on devices 0,1, then
# `medddpm train --devices 0,1` (10 steps) with one process per device (nccl_process.rs) and
# with threads of one process (nccl.rs).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
# Every GPU of the host reads device 0's tuning results.
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c5; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $w/machine.txt
timeout 120 /tmp/medddpm check-kernels --backend cuda --precision bf16 --collective-devices 0,1 > $w/check-collective.log 2>&1
echo "check-kernels collective rc=$?"; grep -iE "all-reduce|nccl|ok|fail" $w/check-collective.log | tail -6 | cut -c1-250
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 10|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for launch in processes threads; do
  timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$launch --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn --devices 0,1 --launch $launch > $w/train-$launch.log 2>&1
  echo "train --launch $launch rc=$?"; grep -iE "nccl|replica|rror" $w/train-$launch.log | head -4 | cut -c1-250
  cp $w/run-$launch/metrics.jsonl $w/metrics-$launch.jsonl 2>/dev/null
  python3 -c "
import json,sys
m=[json.loads(l) for l in open('$w/metrics-$launch.jsonl')]
print('  losses', [round(x['loss'],6) for x in m])" 2>&1 | cut -c1-300
done
rm -rf $w/run-*
tar czf $out/logs.tgz -C /tmp c5
