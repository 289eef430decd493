#!/usr/bin/env bash
# Call 1 (one H200): TF32 convolutions on cuDNN graph API plans (engines keeping f32 inputs and
# sums), and the fastest proposal's knobs tried for slow shapes. One build, new (the commit in
# .device-bin/binary-commit.txt); MEDDDPM_CUDNN_LEGACY=1 ("legacy") runs the same binary on
# cuDNN's legacy functions, the TF32 path before. TF32 has no plans in the carried cache, so
# new's first TF32 run searches them (knobs included); bf16 runs with the carried plans
# ("bf16-kept", chosen without knobs) and with its plan file removed ("bf16-knobs": searched
# again, knobs included). check-kernels tf32 checks the plans' results against the reference.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; tune_cache; cupti_library
W=/tmp/c1; rm -rf $W; mkdir -p $W
machine_info $W
summary() {
  python3 - $W/bench-$1/results.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g = r.get('train_gpu') or {}
print(f"  first train step {r.get('first_train_step_s')} s; busy {g.get('busy_ms', float('nan')):.2f} of {g.get('wall_ms', float('nan')):.2f} ms traced")
conv = {}
for t in g.get('top', []):
    for k in ('wgrad', 'dgrad', 'fprop'):
        if k in t['name']: conv[k] = conv.get(k, 0) + t['ms']
print('  cuDNN kernels a step (ms): ' + ', '.join(f"{k} {v:.2f}" for k, v in conv.items()))
PY
}
t0=$SECONDS
BIN=/tmp/medddpm-new MEDDDPM_CUDNN_LEGACY=1 bench_run tf32-legacy-1 90 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-legacy-1
BIN=/tmp/medddpm-new bench_run tf32-new-1 150 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-new-1
cp $MEDDDPM_TUNE_CACHE/cuda-tf32/cudnn-plans.json $W/cudnn-plans-tf32.json 2>/dev/null
BIN=/tmp/medddpm-new MEDDDPM_CUDNN_LEGACY=1 bench_run tf32-legacy-2 90 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-legacy-2
BIN=/tmp/medddpm-new bench_run tf32-new-2 90 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-new-2
timeout 90 /tmp/medddpm-new check-kernels --backend cuda --conv-engine cudnn --precision tf32 \
  --out $W/check-kernels-tf32.json > $W/check-kernels-tf32.log 2>&1
echo "check-kernels cudnn tf32 rc=$? ($SECONDS s): $(grep -vE '^\[tune\]' $W/check-kernels-tf32.log | tail -1 | cut -c1-200)"
BIN=/tmp/medddpm-new bench_run bf16-kept 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-kept
cp $MEDDDPM_TUNE_CACHE/cuda-bf16/cudnn-plans.json $W/cudnn-plans-bf16-kept.json 2>/dev/null
rm -f $MEDDDPM_TUNE_CACHE/cuda-bf16/cudnn-plans.json
BIN=/tmp/medddpm-new bench_run bf16-knobs 120 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-knobs
cp $MEDDDPM_TUNE_CACHE/cuda-bf16/cudnn-plans.json $W/cudnn-plans-bf16-knobs.json 2>/dev/null
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
pack_tune_cache $out
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
