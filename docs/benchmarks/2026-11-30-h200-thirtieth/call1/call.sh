#!/usr/bin/env bash
# Thirtieth session, call 1 (two H200s): the code after this session's issue-37 changes (the CUDA
# engine in medddpm-cudnn with typed errors, notes through the log facade and the binary's
# logger, replicas receiving the compute settings once, a precision left to the backend decided
# once, the deduplicated portable-kernel and sampler code): check-kernels with cuDNN (bf16), the
# bf16 bench with this binary and the previous session's (the memory pool's buckets), `medddpm
# train` on one device (its notes), then `train --devices 0,1` in processes and in threads
# (equal losses). Call 2: check-kernels with our CubeCL convolutions, the bench with graphs.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c1; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
timeout 90 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 > $w/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$?"; tail -1 $w/check-kernels-cudnn.log | cut -c1-300
# The memory pool's buckets (48 here; cubecl's 24 in the previous session's last release build):
# the bench without graphs (peak of the steps as they come) with each binary, then with graphs.
xz -dc .device-bin/medddpm-prev.xz > /tmp/medddpm-old && chmod +x /tmp/medddpm-old
for b in old new; do
  bin=/tmp/medddpm; [ $b = old ] && bin=/tmp/medddpm-old
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$b.txt &
  smi=$!
  timeout 150 $bin bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$b --timeout 140 > $w/bench-$b.log 2>&1
  echo "bench $b rc=$? whole-GPU peak $(sort -n $w/smi-bench-$b.txt | tail -1) MiB (before: $(head -1 $w/smi-bench-$b.txt))"; kill $smi
  grep -E "^\| cuda" $w/bench-$b.log | head -8 | cut -c1-200
done
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 10|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-train-one.txt &
smi=$!
timeout 120 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-one --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/train-one.log 2>&1
echo "train one device rc=$? whole-GPU peak $(sort -n $w/smi-train-one.txt | tail -1) MiB"; kill $smi
python3 -c "
import json
m=[json.loads(l) for l in open('$w/run-one/metrics.jsonl')]
t=[b['elapsed_s']-a['elapsed_s'] for a,b in zip(m[2:],m[3:])]
print('  optimizer step (steps 3-10) median ms', round(sorted(t)[len(t)//2]*1000,1))" 2>&1 | cut -c1-200
 grep -vE "^\[tune\]|^ *[0-9]+%|step " $w/train-one.log | head -8 | cut -c1-250
for launch in processes threads; do
  timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$launch --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn --devices 0,1 --launch $launch > $w/train-$launch.log 2>&1
  echo "train --launch $launch rc=$?"; grep -iE "nccl|replica|rror" $w/train-$launch.log | head -4 | cut -c1-250
done
for r in one processes threads; do
  cp $w/run-$r/metrics.jsonl $w/metrics-$r.jsonl 2>/dev/null
  python3 -c "
import json
m=[json.loads(l) for l in open('$w/metrics-$r.jsonl')]
print('  $r losses', [round(x['loss'],7) for x in m])" 2>&1 | cut -c1-300
done
rm -rf $w/run-*; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c1
