#!/usr/bin/env bash
# Thirty-first session, call 6 (one H200): activation checkpointing `norms` (each ResBlock's
# GroupNorm + SiLU and its convolution as one node that recomputes the normalisation in the
# backward pass). The bench (whole-head 128^3, bf16, batch 1, cuDNN, channels-last) without and
# with it, each in its own process with nvidia-smi's trace (peak of the whole GPU) and its
# micro-step; BraTS bf16 with it; then `medddpm train` (released settings, 10 steps on 128^3
# phantoms) without and with it: losses, optimizer step, peak. Binary: this session's release
# build with `norms`.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c6; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
start=$(date +%s)
bench_one() {
  local name=$1 model=$2 size=$3 ckpt=$4 limit=$5
  if [ $(( $(date +%s) - start + limit )) -gt 520 ]; then echo "$name skipped (time)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt &
  local smi=$!
  timeout $limit /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --model $model --size $size --activation-checkpointing $ckpt \
    --warmup 2 --steps 10 --out $w/bench-$name --timeout $((limit - 5)) > $w/bench-$name.log 2>&1
  local rc=$?
  kill $smi
  python3 - "$w" "$name" "$rc" <<'PY'
import json, sys
w, name, rc = sys.argv[1:]
smi = [float(l) for l in open(f"{w}/smi-{name}.txt") if l.strip()]
try:
    r = [json.loads(l) for l in open(f"{w}/bench-{name}/results.jsonl")][-1]
    b = (r.get("status"), "micro-step", r.get("train_step_median_ms"), "sampling", r.get("sample_step_median_ms"), "pools", r.get("burn_memory_mib"))
except Exception as e:
    b = ("no results", str(e)[:80])
print(name, "rc", rc, "smi peak", max(smi) if smi else None, b)
PY
}
bench_one wh-none whole-head 128 none 80
bench_one wh-norms whole-head 128 norms 80
bench_one wh-none-again whole-head 128 none 80
bench_one wh-norms-again whole-head 128 norms 80
bench_one br-norms brats 144,192,192 norms 120
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e 's|^steps = .*|steps = 10|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
sed -e 's|^# activation_checkpointing = "blocks"|activation_checkpointing = "norms"|' $w/train.toml > $w/train-norms.toml
grep -q '^activation_checkpointing = "norms"' $w/train-norms.toml || echo "norms not set"
for mode in none norms; do
  toml=$w/train.toml; [ $mode = norms ] && toml=$w/train-norms.toml
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-train-$mode.txt &
  smi=$!
  timeout 100 /tmp/medddpm train --experiment $toml --run-dir $w/run-$mode --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn > $w/train-$mode.log 2>&1
  echo "train $mode rc=$? whole-GPU peak $(sort -n $w/smi-train-$mode.txt | tail -1) MiB"; kill $smi
  cp $w/run-$mode/metrics.jsonl $w/metrics-$mode.jsonl 2>/dev/null
  python3 -c "
import json
m=[json.loads(l) for l in open('$w/metrics-$mode.jsonl')]
t=[b['elapsed_s']-a['elapsed_s'] for a,b in zip(m[2:],m[3:])]
print('  losses', [round(x['loss'],7) for x in m])
print('  optimizer step (steps 3-10) median ms', round(sorted(t)[len(t)//2]*1000,1))" 2>&1 | cut -c1-300
done
rm -rf $w/run-*; find $w -name results.png -delete
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c6
