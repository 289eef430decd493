#!/usr/bin/env bash
# Call 3 (one H200): how long an idle runner thread should let a partial batch stand before it
# takes it. One binary (new, .device-bin/binary-commit.txt), three policies interleaved: w0
# (MEDDDPM_PARTIAL_BATCH_US=0: at once, call 1's new), w20 (20 us without a new task) and full
# (MEDDDPM_FULL_BATCHES=1: cubecl's batches of 32). The bf16 bench with cuDNN (steps, GPU
# busy, gaps, the threads' time and batches), `medddpm train` (released whole-head settings, 12
# steps) with each, then bf16 with our CubeCL convolutions (w0), given the time to compile its
# kernels on a fresh machine.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; tune_cache; cupti_library
W=/tmp/c3; rm -rf $W; mkdir -p $W
machine_info $W
policy() {  # NAME -> the environment for it
  case $1 in
    w0) echo "MEDDDPM_PARTIAL_BATCH_US=0" ;;
    w20) echo "MEDDDPM_PARTIAL_BATCH_US=20" ;;
    full) echo "MEDDDPM_FULL_BATCHES=1" ;;
  esac
}
runs="w0-1 w20-1 full-1 w0-2 w20-2 full-2 w0-3 w20-3"
for run in $runs; do
  (export $(policy ${run%-*}); BIN=/tmp/medddpm-new bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn)
  python3 - $W/bench-$run/results.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g, t = r['train_gpu'], r['train_threads_ms']
print(f"  busy {g['busy_ms']:.2f} ms, idle in gaps {g['idle']['long_ms']:.2f}, first GPU work {g['host']['start_wait_ms']:.2f} ms; fusion running {t['fusion thread running']:.1f} ms in {t.get('fusion thread running: calls', 0):.0f} batches, waiting {t['fusion thread waiting for the device thread']:.1f}; device running {t['device thread running']:.1f} in {t.get('device thread running: calls', 0):.0f}; caller waiting {t['caller waiting for the fusion thread']:.1f}")
PY
done
train_toml 12 > $W/train.toml
for v in w0 w20 full; do
  smi=$(poll_memory $W/smi-train-$v.txt 0)
  env $(policy $v) timeout 80 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run-$v \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train-$v.log 2>&1
  echo "train $v rc=$? whole-GPU peak $(peak_mib $W/smi-train-$v.txt) MiB ($SECONDS s)"; kill $smi
  train_summary $W/run-$v/metrics.jsonl
  cp $W/run-$v/metrics.jsonl $W/train-metrics-$v.jsonl
done
rm -rf $W/run-*/checkpoints $W/run-*/samples
if [ $SECONDS -lt 370 ]; then
  BIN=/tmp/medddpm-new bench_run cubecl 200 --precisions bf16 --layouts ndhwc --conv-engine cubecl
else echo "cubecl skipped ($SECONDS s)"; fi
for run in $runs cubecl; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
