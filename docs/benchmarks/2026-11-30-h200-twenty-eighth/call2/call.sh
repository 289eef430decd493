#!/usr/bin/env bash
# Twenty-eighth session, call 2 (the committed code: page-locked batches and one StepGraphs for
# both graphed steps). The bf16 bench with CUDA graphs (each replay checked value for value
# against the step as it comes), medddpm train (40 steps) as it comes and with graphs (losses
# compared, peak memory from nvidia-smi), medddpm sample (250 DDPM steps, one mask) as it comes
# and with graphs, then the PyTorch reference under torch.compile (default, reduce-overhead)
# profiled the same way on the same GPU.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c2; mkdir -p $w
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'; } > $w/machine.txt 2>&1
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 140 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|first .* took|peak" $w/bench-bf16.log | cut -c1-300
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in eager graphs; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-train-$mode.txt &
  smi=$!
  timeout 100 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn $flag > $w/train-$mode.log 2>&1
  echo "train $mode rc=$? peak $(sort -n $w/smi-train-$mode.txt | tail -1) MiB"; kill $smi
  grep -E "CUDA graphs|rror" $w/train-$mode.log | cut -c1-300
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl
  python3 - $w/metrics-$mode.jsonl <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; final loss {m[-1]['loss']!r}")
EOF2
done
python3 - $w/metrics-graphs.jsonl $w/metrics-eager.jsonl <<'EOF2'
import json, sys
a = [json.loads(l)['loss'] for l in open(sys.argv[1])]
b = [json.loads(l)['loss'] for l in open(sys.argv[2])]
print(f"train losses equal in {sum(x == y for x, y in zip(a, b))} of {len(a)} steps (graphs vs eager)")
EOF2
mkdir -p $w/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $w/masks/
for mode in graphs eager; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  t0=$(date +%s.%N)
  timeout 60 /tmp/medddpm sample --checkpoint $w/run-graphs --masks $w/masks --out $w/samples-$mode \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn $flag > $w/sample-$mode.log 2>&1
  echo "sample $mode rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  grep -E "CUDA graphs|wrote|rror" $w/sample-$mode.log | cut -c1-300
done
python3 - $w <<'EOF2'
import gzip, sys, glob, os
import numpy as np
w = sys.argv[1]
load = lambda p: np.frombuffer(gzip.open(p).read()[352:], dtype=np.float32)
for f in sorted(glob.glob(f"{w}/samples-graphs/*.nii.gz")):
    name = os.path.basename(f)
    g, e = load(f), load(f"{w}/samples-eager/{name}")
    print(f"{name} graphs vs eager: {int((g != e).sum())} of {g.size} voxels differ, largest {float(np.abs(g - e).max()):.3e}")
EOF2
for mode in 1 2; do
  PYTHONUNBUFFERED=1 timeout 170 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile $mode \
    --steps 10 --profiled 3 > $w/torch-compile$mode.json 2> $w/torch-compile$mode.log
  echo "torch compile=$mode rc=$?"
  python3 - $w/torch-compile$mode.json <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  {k}: wall {t['wall_ms_median']:.1f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
EOF2
done
rm -rf $w/run-* $w/samples-* $w/masks; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c2
pack_tune_cache $out
