#!/usr/bin/env bash
# Call 2 (one H200): `medddpm train` (released whole-head settings, 12 steps) with the EMA's
# copy in buffers of its own (ema, the release build in .device-bin/medddpm-ema.xz) against call
# 1's build of 85dc597 (new), interleaved, whole-GPU memory polled; then TF32 and our portable
# CubeCL convolutions in bf16 with the ema build (issue 36's targets, last measured two sessions
# ago).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries ema new; tune_cache; cupti_library
W=/tmp/c2; mkdir -p $W
machine_info $W
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
for run in ema-1 new-1 ema-2 new-2; do
  if [ $SECONDS -gt 420 ]; then echo "train $run skipped ($SECONDS s)"; continue; fi
  smi=$(poll_memory $W/smi-train-$run.txt 0)
  timeout 80 /tmp/medddpm-${run%-*} train --experiment $W/train.toml --run-dir $W/run-$run --backend cuda \
    --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train-$run.log 2>&1
  echo "train $run rc=$? whole-GPU peak $(peak_mib $W/smi-train-$run.txt) MiB ($SECONDS s)"; kill $smi
  python3 - $W/run-$run/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
  cp $W/run-$run/metrics.jsonl $out/metrics-$run.jsonl 2>/dev/null
  rm -rf $W/run-$run/checkpoints
done
BIN=/tmp/medddpm-ema bench_run tf32 100 --precisions tf32 --layouts ndhwc --conv-engine cudnn
BIN=/tmp/medddpm-ema bench_run cubecl 150 --precisions bf16 --layouts ndhwc --conv-engine cubecl
pack_tune_cache $out; rm -f $out/compiled.txz
for run in tf32 cubecl; do cp $W/bench-$run/results.jsonl $out/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
