#!/usr/bin/env bash
# Twenty-ninth session, call 2 (same binary as call 1): what a user runs on a fresh machine with
# the shipped tuning results: `medddpm train` (10 optimizer steps) with an empty cache folder
# and HOME, then `medddpm sample` (one mask, 250 DDPM steps) with another empty cache folder and
# HOME, then again warm; then the bf16 bench beside torch.compile (default mode), same call.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary
w=/tmp/c2; mkdir -p $w /tmp/home-t /tmp/home-s
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 10|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
t0=$(date +%s.%N)
HOME=/tmp/home-t MEDDDPM_TUNE_CACHE=/tmp/fresh-t timeout 200 /tmp/medddpm train --experiment $w/train.toml \
  --run-dir $w/run --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $w/train-fresh.log 2>&1
echo "train fresh rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
grep -E "tuning:|convolutions:|rror" $w/train-fresh.log | cut -c1-300
cp $w/run/metrics.jsonl $w/metrics-fresh.jsonl
python3 - $w/metrics-fresh.jsonl <<'EOF2'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
print("  elapsed_s at steps 1-3:", [round(x['elapsed_s'], 2) for x in m[:3]], "step 10:", round(m[-1]['elapsed_s'], 2))
EOF2
mkdir -p $w/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $w/masks/
for run in fresh warm; do
  t0=$(date +%s.%N)
  HOME=/tmp/home-s MEDDDPM_TUNE_CACHE=/tmp/fresh-s timeout 120 /tmp/medddpm sample --checkpoint $w/run \
    --masks $w/masks --out $w/samples-$run --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn \
    > $w/sample-$run.log 2>&1
  echo "sample $run rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  grep -E "tuning:|rror" $w/sample-$run.log | cut -c1-300; tail -2 $w/sample-$run.log | cut -c1-300
done
export MEDDDPM_TUNE_CACHE=/tmp/fresh-t HOME=/tmp/home-t
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 140 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median" $w/bench-bf16.log | cut -c1-200
PYTHONUNBUFFERED=1 timeout 280 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $w/torch-compile1.json 2> $w/torch-compile1.log
echo "torch compile=1 rc=$?"; cut -c1-600 $w/torch-compile1.json
rm -rf $w/run $w/samples-*; find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c2
