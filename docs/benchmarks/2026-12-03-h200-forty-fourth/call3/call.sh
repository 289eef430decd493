#!/usr/bin/env bash
# Call 3 (one H200): two builds interleaved, the commits in .device-bin/binary-commit.txt: new
# (the session's final code: the GroupNorm of two parts with each part's columns on threads of
# their own, one GroupNorm operation of NormInput) and parts (ac86dd6, call 1's new: the
# GroupNorm of two parts, the joined view's threads; base a4b5e69 left out, the carried tree's
# 64 MiB): check-kernels bf16 with cuDNN for new, the bf16 bench (GPU busy, launches, the
# GroupNorm kernels' time, peak, loss), `medddpm train` (released whole-head settings, 12 steps)
# and `medddpm sample` with new, and the PyTorch reference under torch.compile (default mode,
# tuned; .device-peer, run and not copied) in the same call.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new parts; tune_cache; cupti_library
W=/tmp/c3; mkdir -p $W
machine_info $W
t0=$SECONDS
timeout 150 /tmp/medddpm-new check-kernels --backend cuda --conv-engine cudnn --precision bf16 \
  --out $W/check-kernels-cudnn.json > $W/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-cudnn.log | tail -1 | cut -c1-200)"
grep -E "ndhwc GroupNorm .*parts" $W/check-kernels-cudnn.log | cut -c1-220
runs="new-1 parts-1 new-2 parts-2 new-3 parts-3"
for run in $runs; do
  BIN=/tmp/medddpm-${run%-*} bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  grep -E "^\| cuda\+cudnn/bf16/ndhwc \| training micro-step" $W/bench-$run.log | cut -c1-120
  python3 - $W/bench-$run/results.jsonl <<'PY'
import json, sys
g = json.loads(open(sys.argv[1]).readline())['train_gpu']
k = {t['name'][:24]: round(t['ms'], 3) for t in g['top'] if t['name'].startswith(('input_grad', 'normalise', 'tile_', 'join_last', 'split_last'))}
print(f"  busy {g['busy_ms']:.2f} ms, {g['launches']:.0f} launches; {k}")
PY
done
train_toml 12 > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
train_summary $W/run/metrics.jsonl
cp $W/run/metrics.jsonl $W/train-metrics.jsonl
mkdir -p $W/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $W/masks/
smi=$(poll_memory $W/smi-sample.txt 0)
t0=$SECONDS
timeout 60 /tmp/medddpm-new sample --checkpoint $W/run --masks $W/masks --out $W/samples \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $W/sample.log 2>&1
echo "sample rc=$? wall $((SECONDS - t0)) s, whole-GPU peak $(peak_mib $W/smi-sample.txt) MiB"; kill $smi
tail -1 $W/sample.log | cut -c1-300
if [ $SECONDS -lt 345 ]; then torch_compile_run 230; else echo "torch.compile skipped ($SECONDS s)"; fi
rm -rf $W/run/checkpoints $W/samples $W/run/samples
for run in $runs; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
