#!/usr/bin/env bash
# Thirty-third session, call 3 (two H200s): `medddpm synthesize` at throughput (issue 40):
# a whole-head model (full size, 128^3, weights from 4 training steps on phantoms: the time does
# not depend on them), DPM-Solver++ 25 steps, bf16, cuDNN, channels-last, nnU-Net layout;
# one GPU, then two; beside the reference's own sampler (250 DDPM steps, as released) on GPU 0.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c3; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())'; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e 's|^steps = .*|steps = 4|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    -e 's|^save_every = .*|save_every = 4|' \
    experiments/whole-head-128.toml > $w/train.toml
timeout 120 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/train.log 2>&1
echo "train rc=$?"; tail -2 $w/train.log | cut -c1-300; cp $w/train.log $out/logs/
ls /tmp/phantoms128 /tmp/phantoms128/* | head -5
masks=$(ls -d /tmp/phantoms128/mask* 2>/dev/null | head -1); echo "masks: $masks"
rate() { python3 - "$1" <<'EOP'
import json, sys, os, statistics
d = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(d, 'manifest.jsonl')) if l.strip()]
times = sorted(os.path.getmtime(os.path.join(d, l['files'][-1])) for l in lines)
secs = [l['seconds'] for l in lines]
n = len(times)
steady = (n - 1) / (times[-1] - times[0]) * 3600 if n > 2 and times[-1] > times[0] else float('nan')
print(f"  {n} pairs; steady {steady:.0f} volumes/hour (first to last file); per pair {statistics.median(secs):.3f} s median")
EOP
}
synth() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout 200 /tmp/medddpm synthesize --checkpoint $w/run --masks $masks --out $w/$name \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --dataset-layout nnunet "$@" > $w/$name.log 2>&1
  echo "synthesize $name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  tail -3 $w/$name.log | cut -c1-300; rate $w/$name
  cp $w/$name.log $out/logs/; cp $w/$name/manifest.jsonl $out/logs/$name-manifest.jsonl 2>/dev/null
  cp $w/$name/synthesize.json $out/logs/$name-synthesize.json 2>/dev/null
  find $w/$name -name dataset.json -exec cp {} $out/logs/$name-dataset.json \;
}
synth one-gpu --count 48 --devices 0
synth one-gpu-b1 --count 24 --devices 0 --batch-size 1
synth two-gpus --count 96 --devices 0,1
PYTHONUNBUFFERED=1 timeout 150 python3 scripts/torch-sample-volume.py --volumes 2 > $w/torch-sample.json 2> $w/torch-sample.log
echo "reference sampler rc=$?"; tail -1 $w/torch-sample.json | cut -c1-300; cp $w/torch-sample.* $out/logs/
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
pack_tune_cache $out
ls -la $out
