#!/usr/bin/env bash
# Twenty-seventh session, call 7 (the committed code, 80f8b3b: call 2's behaviour after the refactoring; no torch; then the TF32 bench): CUDA graphs. The bf16 bench (sampling steps and training
# micro-steps as they come, then replayed from a graph, each with one call checked value for
# value against the uncaptured one), then medddpm train (40 steps) with and without graphs (the
# losses compared, peak memory from nvidia-smi), then medddpm sample (250 DDPM steps, one mask)
# with and without graphs, the two samples compared byte for byte.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c7; mkdir -p $w
timeout 330 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 320 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|GPU per|graph|CUDA|peak|per replayed|host per" $w/bench-bf16.log | cut -c1-330
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
for mode in graphs eager; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $w/smi-train-$mode.txt &
  smi=$!
  timeout 200 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
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
same = sum(x == y for x, y in zip(a, b))
print(f"train losses equal in {same} of {len(a)} steps (graphs vs eager)")
EOF2
mkdir -p $w/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $w/masks/
for mode in graphs eager; do
  flag=""; [ $mode = graphs ] && flag="--cuda-graphs"
  t0=$(date +%s.%N)
  timeout 120 /tmp/medddpm sample --checkpoint $w/run-graphs --masks $w/masks --out $w/samples-$mode \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn $flag > $w/sample-$mode.log 2>&1
  echo "sample $mode rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  grep -E "CUDA graphs|wrote|rror" $w/sample-$mode.log | cut -c1-300
done
python3 - $w <<'EOF2'
import gzip, sys, glob, os
import numpy as np
w = sys.argv[1]
def load(p):
    raw = gzip.open(p).read()
    return np.frombuffer(raw[352:], dtype=np.float32)
for f in sorted(glob.glob(f"{w}/samples-graphs/*.nii.gz")):
    name = os.path.basename(f)
    g, e = (load(f"{w}/samples-{m}/{name}") for m in ("graphs", "eager"))
    for label, a, b in (("graphs vs eager", g, e),):
        print(f"{name} {label}: {int((a != b).sum())} of {a.size} voxels differ, largest {float(np.abs(a - b).max()):.3e}")
EOF2
timeout 200 /tmp/medddpm bench --backends cuda --precisions tf32 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --out $w/bench-tf32 --timeout 190 > $w/bench-tf32.log 2>&1
echo "bench tf32 rc=$?"; grep -E "median|GPU per" $w/bench-tf32.log | cut -c1-300
rm -rf $w/run-* $w/samples-* $w/masks; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c7
pack_tune_cache $out
