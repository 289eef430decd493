#!/usr/bin/env bash
# Call 1 (one H200): Adam updating parameters and moments in place (new, the release build of
# the commit in .device-bin/binary-commit.txt) checked and timed on CUDA for the first time:
# check-kernels bf16 with cuDNN (its Adam rows run both the in-place and the new-buffer path),
# the bf16 bench interleaved against the same tree with the previous Adam kernel (old), then
# `medddpm train` (released whole-head settings, 12 steps) and the PyTorch reference under
# torch.compile (default mode, tuned; .device-peer, run and not copied) in the same call.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new old; tune_cache; cupti_library
W=/tmp/c1; mkdir -p $W
machine_info $W
t0=$SECONDS
timeout 150 /tmp/medddpm-new check-kernels --backend cuda --conv-engine cudnn --precision bf16 \
  --out $W/check-kernels-cudnn.json > $W/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-cudnn.log | tail -1 | cut -c1-200)"
grep -iE "adam" $W/check-kernels-cudnn.log | cut -c1-200
for run in new-1 old-1 new-2 old-2 new-3 old-3; do
  BIN=/tmp/medddpm-${run%-*} bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  grep -E "host per training|GPU busy" $W/bench-$run.log | cut -c1-220
done
if [ $SECONDS -lt 470 ]; then
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
python3 - $W/run/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
else echo "train skipped ($SECONDS s)"; fi
if [ $SECONDS -lt 330 ]; then
smi=$(poll_memory $W/smi-torch.txt 0)
PYTHONUNBUFFERED=1 timeout $((570 - SECONDS)) python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $W/torch-compile1.json 2> $W/torch-compile1.log
echo "torch compile=1 rc=$? whole-GPU peak $(peak_mib $W/smi-torch.txt) MiB ($SECONDS s)"; kill $smi
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
else echo "torch skipped ($SECONDS s)"; fi
rm -rf $W/run/checkpoints
pack_tune_cache $out; rm -f $out/compiled.txz
for run in new-1 old-1 new-2 old-2 new-3 old-3; do cp $W/bench-$run/results.jsonl $out/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
