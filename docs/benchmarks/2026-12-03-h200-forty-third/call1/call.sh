#!/usr/bin/env bash
# Call 1 (one H200): the release build of this session's code (new, the commit in
# .device-bin/binary-commit.txt: the autodiff nodes' shared backward steps, node::Parents and
# node_of, and the norm-and-convolution node as one function; no change in arithmetic) against
# 8a2cf38 (base, the build of the forty-second session's call 2): check-kernels bf16 with cuDNN
# and with our CubeCL convolutions, the bf16 bench interleaved new/base (same figures within
# their spread, the same loss), `medddpm train` (released whole-head settings, 12 steps; its
# losses against the last calls') and `medddpm sample` with new, and the PyTorch reference under
# torch.compile (default mode, tuned; .device-peer, run and not copied) in the same call.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new base; tune_cache; cupti_library
W=/tmp/c1; mkdir -p $W
machine_info $W
for engine in cudnn cubecl; do
  t0=$SECONDS
  timeout 150 /tmp/medddpm-new check-kernels --backend cuda --conv-engine $engine --precision bf16 \
    --out $W/check-kernels-$engine.json > $W/check-kernels-$engine.log 2>&1
  echo "check-kernels $engine bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-$engine.log | tail -1 | cut -c1-200)"
done
runs="new-1 base-1 new-2 base-2 new-3 base-3"
for run in $runs; do
  BIN=/tmp/medddpm-${run%-*} bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  grep -E "^\| cuda\+cudnn/bf16/ndhwc \| (training micro-step|sampling step)" $W/bench-$run.log | cut -c1-120
  grep -iE "loss" $W/bench-$run.log | tail -1 | cut -c1-160
done
train_toml 12 > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
train_summary $W/run/metrics.jsonl
cp $W/run/metrics.jsonl $out/train-metrics.jsonl
mkdir -p $W/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $W/masks/
smi=$(poll_memory $W/smi-sample.txt 0)
t0=$SECONDS
timeout 60 /tmp/medddpm-new sample --checkpoint $W/run --masks $W/masks --out $W/samples \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $W/sample.log 2>&1
echo "sample rc=$? wall $((SECONDS - t0)) s, whole-GPU peak $(peak_mib $W/smi-sample.txt) MiB"; kill $smi
tail -1 $W/sample.log | cut -c1-300
smi=$(poll_memory $W/smi-torch.txt 0)
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $W/torch-compile1.json 2> $W/torch-compile1.log
echo "torch compile=1 rc=$? whole-GPU peak $(peak_mib $W/smi-torch.txt) MiB ($SECONDS s)"; kill $smi
tail -2 $W/torch-compile1.log | cut -c1-200
python3 - $W/torch-compile1.json <<'EOP'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  torch {k}: wall {t['wall_ms_median']:.2f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
EOP
rm -rf $W/run/checkpoints $W/samples
for run in $runs; do cp $W/bench-$run/results.jsonl $out/results-$run.jsonl 2>/dev/null; done
cp $W/check-kernels-*.json $W/torch-compile1.json $out/ 2>/dev/null
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
