#!/usr/bin/env bash
# Call 3 (one H200): the session's final code (.device-bin/binary-commit.txt: TF32 on cuDNN
# graph API plans, their choices shipped in the binary) as a user runs it, beside the tuned
# PyTorch reference under torch.compile, default mode and mode="reduce-overhead" (.device-peer,
# run and not copied), in the same call. TF32 first (its plan file removed from call 1's tuning
# cache, so the binary seeds the shipped plans: no search), against the same binary on cuDNN's
# legacy functions (MEDDDPM_CUDNN_LEGACY=1); bf16 twice; `medddpm train` with the released
# whole-head settings (12 steps); then PyTorch.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; tune_cache; cupti_library
W=/tmp/c3; rm -rf $W; mkdir -p $W
machine_info $W
summary() {
  python3 - $W/bench-$1/results.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g = r.get('train_gpu') or {}
print(f"  first train step {r.get('first_train_step_s')} s, first sampling step {r.get('first_sample_step_s')} s; train busy {g.get('busy_ms', float('nan')):.2f} of {g.get('wall_ms', float('nan')):.2f} ms traced")
conv = {}
for t in g.get('top', []):
    for k in ('wgrad', 'dgrad', 'fprop'):
        if k in t['name']: conv[k] = conv.get(k, 0) + t['ms']
print('  cuDNN kernels a step (ms): ' + ', '.join(f"{k} {v:.2f}" for k, v in conv.items()))
PY
}
T=$MEDDDPM_TUNE_CACHE
rm -f $T/cuda-tf32/cudnn-plans.json
BIN=/tmp/medddpm-new bench_run tf32-new-1 90 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-new-1
cp $T/cuda-tf32/cudnn-plans.json $W/cudnn-plans-tf32-seeded.json
BIN=/tmp/medddpm-new MEDDDPM_CUDNN_LEGACY=1 bench_run tf32-legacy 80 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-legacy
BIN=/tmp/medddpm-new bench_run tf32-new-2 80 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-new-2
BIN=/tmp/medddpm-new bench_run bf16-1 70 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-1
BIN=/tmp/medddpm-new bench_run bf16-2 70 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-2
train_toml 12 > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
train_summary $W/run/metrics.jsonl
cp $W/run/metrics.jsonl $W/train-metrics.jsonl
rm -rf $W/run/checkpoints $W/run/samples
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
tar czf $out/logs.tgz -C /tmp c3
if [ $SECONDS -lt 330 ]; then torch_compile_run 170; else echo "torch.compile skipped ($SECONDS s)"; fi
if [ $SECONDS -lt 420 ]; then
  smi=$(poll_memory "$W/smi-torch2.txt" 0)
  PYTHONUNBUFFERED=1 timeout $((570 - SECONDS)) python3 scripts/torch-gpu-profile.py --config bf16_fix \
    --compile 2 --steps 10 --profiled 3 > "$W/torch-compile2.json" 2> "$W/torch-compile2.log"
  echo "torch compile=2 (reduce-overhead) rc=$? whole-GPU peak $(peak_mib "$W/smi-torch2.txt") MiB ($SECONDS s)"
  kill "$smi"
  tail -2 "$W/torch-compile2.log" | cut -c1-200
  python3 - "$W/torch-compile2.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  torch reduce-overhead {k}: wall {t['wall_ms_median']:.2f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
PY
else echo "reduce-overhead skipped ($SECONDS s)"; fi
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
