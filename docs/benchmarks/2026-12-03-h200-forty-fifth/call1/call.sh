#!/usr/bin/env bash
# Call 1 (one H200): device threads that take partial batches (the patched cubecl-common: an
# idle runner takes the tasks queued for it instead of waiting for 32). Two builds, the commits
# in .device-bin/binary-commit.txt: new (the patch) and base (the code before it); new also runs
# with MEDDDPM_FULL_BATCHES=1 ("full": cubecl's own policy in the same binary). Interleaved bf16
# benches (GPU busy, gaps, the host threads' batches), check-kernels bf16 with new, `medddpm
# train` (released whole-head settings, 12 steps) with new and full, `medddpm sample` with new,
# and the PyTorch reference under torch.compile (default mode, tuned; .device-peer, run and not
# copied) in the same call.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new base; tune_cache; cupti_library
W=/tmp/c1; mkdir -p $W
machine_info $W
t0=$SECONDS
timeout 150 /tmp/medddpm-new check-kernels --backend cuda --conv-engine cudnn --precision bf16 \
  --out $W/check-kernels-cudnn.json > $W/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-cudnn.log | tail -1 | cut -c1-200)"
runs="base-1 new-1 full-1 base-2 new-2 full-2 new-3"
for run in $runs; do
  bin=${run%-*}; full=
  [ "$bin" = full ] && { bin=new; full=1; }
  MEDDDPM_FULL_BATCHES=$full BIN=/tmp/medddpm-$bin bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  python3 - $W/bench-$run/results.jsonl <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
g, s, t = r['train_gpu'], r['sample_gpu'], r['train_threads_ms']
print(f"  train busy {g['busy_ms']:.2f} of {g['wall_ms']:.2f} ms traced, idle long {g['idle']['long_ms']:.2f} in {g['idle']['long_gaps']:.0f} gaps, short {g['idle']['short_ms']:.2f}; first GPU work {g['host']['start_wait_ms']:.2f} ms")
print(f"  sample busy {s['busy_ms']:.2f} of {s['wall_ms']:.2f} ms traced, idle long {s['idle']['long_ms']:.2f}; first GPU work {s['host']['start_wait_ms']:.2f} ms")
print("  batches a step: fusion {:.0f}, device {:.0f}; fusion running {:.1f} ms, device running {:.1f} ms".format(
    t.get('fusion thread running: calls', float('nan')), t.get('device thread running: calls', float('nan')),
    t['fusion thread running'], t['device thread running']))
PY
done
train_toml 12 > $W/train.toml
for v in new full; do
  bin=new; full=; [ $v = full ] && full=1
  smi=$(poll_memory $W/smi-train-$v.txt 0)
  MEDDDPM_FULL_BATCHES=$full timeout 80 /tmp/medddpm-$bin train --experiment $W/train.toml --run-dir $W/run-$v \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train-$v.log 2>&1
  echo "train $v rc=$? whole-GPU peak $(peak_mib $W/smi-train-$v.txt) MiB ($SECONDS s)"; kill $smi
  train_summary $W/run-$v/metrics.jsonl
  cp $W/run-$v/metrics.jsonl $W/train-metrics-$v.jsonl
done
mkdir -p $W/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $W/masks/
smi=$(poll_memory $W/smi-sample.txt 0)
t0=$SECONDS
timeout 60 /tmp/medddpm-new sample --checkpoint $W/run-new --masks $W/masks --out $W/samples \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $W/sample.log 2>&1
echo "sample rc=$? wall $((SECONDS - t0)) s, whole-GPU peak $(peak_mib $W/smi-sample.txt) MiB"; kill $smi
tail -1 $W/sample.log | cut -c1-300
if [ $SECONDS -lt 345 ]; then torch_compile_run 225; else echo "torch.compile skipped ($SECONDS s)"; fi
rm -rf $W/run-*/checkpoints $W/samples $W/run-*/samples
for run in $runs; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
