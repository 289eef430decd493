#!/usr/bin/env bash
# Runs medddpm-bench on a GPU machine and records device memory from the driver's side.
#
# Usage, from the repository root on the GPU machine:
#   scripts/gpu-step-bench.sh BINARY OUTDIR [medddpm-bench arguments...]
# Writes OUTDIR/result.json (the bench's own timings), OUTDIR/memory.json (baseline and peak
# device memory in MiB, polled with nvidia-smi every 100 ms), OUTDIR/log.txt, OUTDIR/gpu.csv and
# OUTDIR/cubecl-cache.tgz (cubecl's autotune cache, to restore from .device-cache/ next time).
set -u
bin=$1; out=$2; shift 2
mkdir -p "$out"
if [ -f .device-cache/cubecl-cache.tgz ]; then
  tar xzf .device-cache/cubecl-cache.tgz && echo "restored the autotune cache"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/mem.log" &
smi=$!
"$bin" "$@" --out "$out/result.json" 2>&1 | tee "$out/log.txt"
rc=${PIPESTATUS[0]}
kill "$smi" 2>/dev/null
peak=$(sort -n "$out/mem.log" | tail -1)
printf '{"source": "nvidia-smi memory.used, polled every 100 ms", "baseline_mib": %s, "peak_mib": %s}\n' "$base" "$peak" > "$out/memory.json"
cat "$out/memory.json"
rm -f "$out/mem.log"
[ -d target/autotune ] && tar czf "$out/cubecl-cache.tgz" target/autotune
exit "$rc"
