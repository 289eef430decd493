#!/usr/bin/env bash
# Call 2 (one H200): the plan search also timing heuristics modes B and fallback for slow
# shapes, before their knobs. One build, new (.device-bin/binary-commit.txt); MEDDDPM_CUDNN_LEGACY=1
# ("legacy") runs it on cuDNN's legacy functions. TF32: plans searched afresh (call 1's
# tuning cache, its TF32 plan file removed), then warm, legacy between. bf16: the shipped
# plans ("kept"), then searched afresh (an empty plan file, so nothing is seeded), then warm.
# Then the tuned PyTorch reference under torch.compile, default mode and reduce-overhead
# (.device-peer, run and not copied), where time is left.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; tune_cache; cupti_library
W=/tmp/c2; rm -rf $W; mkdir -p $W
machine_info $W
summary() {
  python3 - $W/bench-$1/results.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g = r.get('train_gpu') or {}
print(f"  first train step {r.get('first_train_step_s')} s, first sampling step {r.get('first_sample_step_s')} s; busy {g.get('busy_ms', float('nan')):.2f} of {g.get('wall_ms', float('nan')):.2f} ms traced")
conv = {}
for t in g.get('top', []):
    for k in ('wgrad', 'dgrad', 'fprop'):
        if k in t['name']: conv[k] = conv.get(k, 0) + t['ms']
print('  cuDNN kernels a step (ms): ' + ', '.join(f"{k} {v:.2f}" for k, v in conv.items()))
PY
}
T=$MEDDDPM_TUNE_CACHE
rm -f $T/cuda-tf32/cudnn-plans.json
BIN=/tmp/medddpm-new bench_run tf32-search 150 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-search
cp $T/cuda-tf32/cudnn-plans.json $W/cudnn-plans-tf32.json
BIN=/tmp/medddpm-new MEDDDPM_CUDNN_LEGACY=1 bench_run tf32-legacy 80 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-legacy
BIN=/tmp/medddpm-new bench_run tf32-warm 80 --precisions tf32 --layouts ndhwc --conv-engine cudnn; summary tf32-warm
BIN=/tmp/medddpm-new bench_run bf16-kept 70 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-kept
cp $T/cuda-bf16/cudnn-plans.json $W/cudnn-plans-bf16-kept.json
echo '{}' > $T/cuda-bf16/cudnn-plans.json
BIN=/tmp/medddpm-new bench_run bf16-search 120 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-search
cp $T/cuda-bf16/cudnn-plans.json $W/cudnn-plans-bf16-search.json
BIN=/tmp/medddpm-new bench_run bf16-warm 70 --precisions bf16 --layouts ndhwc --conv-engine cudnn; summary bf16-warm
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
pack_tune_cache $out
if [ $SECONDS -lt 330 ]; then torch_compile_run 200; else echo "torch.compile skipped ($SECONDS s)"; fi
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
