#!/usr/bin/env bash
# Thirty-first session, call 2 (one H200): peak memory of training (the bench's micro-step and
# Adam, each configuration in its own process, nvidia-smi's memory.used polled every 100 ms) for
# configurations the memory plan was not fitted on (call 1's were): another width (C = 32),
# another grid (160^3), batch 2 and 3, strict FP32, BraTS without checkpointing. A configuration
# whose shapes are not in the tuning cache runs twice: cold (kernels tuned during its first
# steps) and warm. Binary: the thirtieth session's (2890d48); the tuning cache call 1 brought back.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c1; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
start=$(date +%s)
# name model size batch precision checkpointing timeout
bench_one() {
  local name=$1 model=$2 size=$3 batch=$4 prec=$5 ckpt=$6 limit=$7
  if [ $(( $(date +%s) - start + limit )) -gt 560 ]; then echo "$name skipped (time)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt &
  local smi=$!
  timeout $limit /tmp/medddpm bench --backends cuda --precisions $prec --layouts ndhwc --conv-engine cudnn \
    --model $model --size $size --batch $batch --activation-checkpointing $ckpt \
    --warmup 1 --steps 3 --no-breakdown --out $w/bench-$name --timeout $((limit - 5)) > $w/bench-$name.log 2>&1
  local rc=$?
  kill $smi
  python3 - "$w" "$name" "$rc" <<'PY'
import json, sys
w, name, rc = sys.argv[1:]
smi = [float(l) for l in open(f"{w}/smi-{name}.txt") if l.strip()]
try:
    r = [json.loads(l) for l in open(f"{w}/bench-{name}/results.jsonl")][-1]
    bench = (r.get("status"), r.get("peak_memory_mib"), r.get("train_step_median_ms"), r.get("burn_memory_mib"))
except Exception as e:
    bench = ("no results", str(e)[:80])
print(name, "rc", rc, "smi before", smi[0] if smi else None, "smi peak", max(smi) if smi else None, "bench", bench)
PY
}
bench_one wh-bf16-b2-warm whole-head 128 2 bf16 none 70
bench_one c32-bf16-b1-cold whole-head-c32 128 1 bf16 none 70
bench_one c32-bf16-b1-warm whole-head-c32 128 1 bf16 none 50
bench_one wh160-bf16-b1-cold whole-head 160 1 bf16 none 90
bench_one wh160-bf16-b1-warm whole-head 160 1 bf16 none 60
bench_one br-bf16-b2 brats 144,192,192 2 bf16 none 90
bench_one br-tf32-b1 brats 144,192,192 1 tf32 none 90
bench_one wh-bf16-b3-ckpt-cold whole-head 128 3 bf16 blocks 90
bench_one wh-bf16-b3-ckpt-warm whole-head 128 3 bf16 blocks 70
bench_one c32-tf32-b2-cold whole-head-c32 128 2 tf32 none 70
bench_one c32-tf32-b2-warm whole-head-c32 128 2 tf32 none 50
bench_one wh-fp32-b1 whole-head 128 1 fp32 none 80
echo "elapsed $(( $(date +%s) - start )) s"
find $w -name results.png -delete
pack_tune_cache $out
tar czf $out/logs.tgz -C /tmp c1
