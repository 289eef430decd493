#!/usr/bin/env bash
# Thirty-fifth session, call 4 (one H200), the release build of 77c9c6f (the merged dedup-d4:
# the CUDA backend's two convolution gradients through one function, the trainer's and
# check-kernels' shared arguments): check-kernels bf16 with cuDNN and with our CubeCL
# convolutions, the bf16 bench, and `medddpm train` (released whole-head settings, 12 steps on
# phantoms: the losses against call 2's one-GPU run).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
for engine in cudnn cubecl; do
  t0=$SECONDS
  timeout 150 /tmp/medddpm check-kernels --backend cuda --conv-engine $engine --precision bf16 --out $w/check-kernels-$engine.json > $w/check-kernels-$engine.log 2>&1
  echo "check-kernels $engine bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $w/check-kernels-$engine.log | tail -1 | cut -c1-200)"
done
timeout 70 /tmp/medddpm bench --backends cuda --layouts ndhwc --precisions bf16 --conv-engine cudnn \
  --warmup 3 --steps 10 --out $w/bench --timeout 65 > $w/bench.log 2>&1
echo "bench rc=$? ($SECONDS s)"; grep -E "median" $w/bench.log | cut -c1-200
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
timeout 100 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $w/train.log 2>&1
echo "train rc=$? ($SECONDS s)"
cp $w/run/metrics.jsonl $w/metrics-train.jsonl 2>/dev/null
python3 - $w/metrics-train.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
rm -rf $w/run/checkpoints $w/bench/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c4
echo "total $SECONDS s"
