#!/usr/bin/env bash
# Thirty-ninth session, call 4 (one H200): this session's two trainer changes against the
# trainer before them, on one machine (calls 1-3 ran on three H200s, and `train` differs by a few
# ms from machine to machine). C = the trainer of 008302c (each micro-batch's loss read on its
# own, then the gradient norm; the working model made at the step's start), A = 64bf6e9 (the
# losses summed on the device and read once, the norm after them), B = 68b6f5d (losses and norm
# in one read; the working model made before that wait); the rest of each build is 68b6f5d's.
# `medddpm train`, released whole-head settings, 24 steps, no GPU trace, interleaved C A B three
# times; the optimizer step's median over steps 3-24 from each metrics.jsonl, and the losses.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
for v in c a b; do
  xz -t .device-bin/medddpm-$v.xz || { echo "carried binary $v is damaged"; exit 3; }
  xz -dc .device-bin/medddpm-$v.xz > /tmp/medddpm-$v && chmod +x /tmp/medddpm-$v
done
cublas_library; tune_cache
W=/tmp/c4; mkdir -p $W
machine_info $W
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 24|" -e "s|^save_every = .*|save_every = 24|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
for i in 1 2 3; do for v in c a b; do
  if [ $SECONDS -gt 500 ]; then echo "train $v$i skipped ($SECONDS s)"; continue; fi
  timeout 70 /tmp/medddpm-$v train --experiment $W/train.toml --run-dir $W/run-$v$i --backend cuda \
    --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train-$v$i.log 2>&1
  echo "train $v$i rc=$? ($SECONDS s)"
  python3 - $W/run-$v$i/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms, min {t[0]*1000:.1f}; losses {[round(x['loss'], 7) for x in m[:4]]} ... {round(m[-1]['loss'], 7)}")
PY
  rm -rf $W/run-$v$i/checkpoints
done; done
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c4
echo "total $SECONDS s"
