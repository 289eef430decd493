#!/usr/bin/env bash
# On the GPU machine, from the repository root (issue 36): our bench's steps with the GPU's
# time traced (CUPTI), `medddpm train` as a user runs it, and the PyTorch reference under
# torch.compile profiled the same way, in one call (the GPUs differ from call to call).
#
#   scripts/gpu-engine-call.sh OUTDIR [PARTS]
# PARTS (default "bench train torch"): any of bench, legacy, bench2, tf32, train, sample (after
# train), check, torch, torch2.
# Needs: .device-bin/medddpm.xz (release build, feature cuda), and for the torch parts the
# reference's diffusion_model/ in .device-peer/medddpm (../shared/peer/README.md).
# Writes OUTDIR/logs.tgz (every log, JSON and report) and the tuning cache to carry back.
set -u
out=$1; parts=${2:-"bench train torch"}
source scripts/gpu-common.sh
unpack_binary; tune_cache
work=$(mktemp -d); mkdir -p "$work/logs"
export NCCL_NVLS_ENABLE=0
# CUPTI for the GPU trace: the copy PyTorch's wheels bring.
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
{ nvidia-smi; echo "CUPTI: ${cupti:-none}"; echo "cuBLAS: ${MEDDDPM_CUBLAS:-system}"; python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())'; } > "$work/logs/machine.txt" 2>&1
head -12 "$work/logs/machine.txt"

has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }

# bench: our bf16 steps; legacy: the same with cuDNN's legacy functions instead of the graph
# API's plans (MEDDDPM_CUDNN_LEGACY=1); bench2: the first again (its plans cached by then).
for part in bench legacy bench2; do
  has $part || continue
  env=""; [ $part = legacy ] && env="MEDDDPM_CUDNN_LEGACY=1"
  env $env /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out "$work/$part" --timeout 300 > "$work/logs/$part-bf16.log" 2>&1
  echo "$part bf16 rc=$?"; grep -E "median|GPU per|breakdown|fall|refus|graph API" "$work/logs/$part-bf16.log" | cut -c1-400
  python3 - "$work/$part/results.jsonl" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("  train %.1f ms (issue %.1f), sample %.1f ms, peak %s MiB" % (r.get('train_step_median_ms') or 0, r.get('train_issue_median_ms') or 0, r.get('sample_step_median_ms') or 0, r.get('peak_memory_mib')))
    for k, v in (r.get('train_threads_ms') or {}).items():
        print("   %-50s %8.1f" % (k, v))
EOF2
done
if has tf32; then
  /tmp/medddpm bench --backends cuda --precisions tf32 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out "$work/bench" --timeout 300 > "$work/logs/bench-tf32.log" 2>&1
  echo "bench tf32 rc=$?"; grep -E "median|GPU per" "$work/logs/bench-tf32.log" | cut -c1-300
fi
if has train; then
  # The released whole-head settings (batch 1, accumulation 2) on eight 128^3 phantoms, bf16,
  # cuDNN, channels-last: with the data cache (the default) and without it (every volume read
  # from disk each time, as a data set larger than the cache is).
  for cache in true false; do
    sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
        -e 's|^normalization = .*|normalization = "none"|' \
        -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = $cache|" \
        -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
        experiments/whole-head-128.toml > "$work/train-$cache.toml"
    rm -rf "$work/run-$cache"
    t0=$(date +%s.%N)
    /tmp/medddpm train --experiment "$work/train-$cache.toml" --run-dir "$work/run-$cache" \
      --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --gpu-trace 10 > "$work/logs/train-$cache.log" 2>&1
    echo "train cache=$cache rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
    cp "$work/run-$cache/metrics.jsonl" "$work/logs/metrics-cache-$cache.jsonl" 2>/dev/null
    cp "$work/run-$cache/gpu-trace.json" "$work/logs/train-gpu-trace-cache-$cache.json" 2>/dev/null
    python3 - "$work/logs/metrics-cache-$cache.jsonl" <<'EOF'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step: median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms over steps {m[5]['step']}-{m[-1]['step']}")
EOF
    grep -iE "fall|refus|cudnn|GPU trace" "$work/logs/train-$cache.log" | cut -c1-600 | head -6
  done
fi
if has sample && [ -d "$work/run-true" ]; then
  # `medddpm sample` as a user runs it: one mask, the whole-head sampler's defaults (250 DDPM
  # steps), from the run trained above.
  mkdir -p "$work/masks" && cp "$(ls /tmp/phantoms128/mask/* | head -1)" "$work/masks/"
  t0=$(date +%s.%N)
  /tmp/medddpm sample --checkpoint "$work/run-true" --masks "$work/masks" --out "$work/samples" \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > "$work/logs/sample.log" 2>&1
  echo "sample rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"; tail -3 "$work/logs/sample.log" | cut -c1-300
fi
if has check; then
  /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 > "$work/logs/check-kernels-bf16.log" 2>&1
  echo "check-kernels rc=$?"; tail -3 "$work/logs/check-kernels-bf16.log" | cut -c1-300
fi
for mode in 1 2; do
  part=torch; [ $mode = 2 ] && part=torch2
  has $part || continue
  PYTHONUNBUFFERED=1 timeout 280 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile $mode \
    --steps 10 --profiled 3 > "$work/logs/torch-compile$mode.json" 2> "$work/logs/torch-compile$mode.log"
  echo "torch compile=$mode rc=$?"
  python3 - "$work/logs/torch-compile$mode.json" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  {k}: wall {t['wall_ms_median']:.1f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches; {t['by_class_ms']}")
    if 'error' in r: print('  error', r['error'])
EOF
done
for d in bench legacy bench2; do cp -r "$work/$d" "$work/logs/" 2>/dev/null; done
tar czf "$out/logs.tgz" -C "$work" logs
pack_tune_cache "$out"
ls -la "$out"
