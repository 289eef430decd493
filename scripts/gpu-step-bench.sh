#!/usr/bin/env bash
# Runs medddpm-bench on a GPU machine and records device memory from the driver's side.
#
# Usage, from the repository root on the GPU machine:
#   scripts/gpu-step-bench.sh BINARY OUTDIR [medddpm-bench arguments...]
# Writes OUTDIR/result.json (the bench's own timings), OUTDIR/memory.json (baseline and peak
# device memory in MiB, polled with nvidia-smi every 100 ms) and OUTDIR/log.txt.
# BENCH_TIMEOUT (seconds, default 3000) bounds the run, so a caller still gets its logs.
# cubecl keeps its autotune cache in target/autotune: `tar czf cache.tgz target/autotune` after a
# run and untar it before the next to skip tuning.
set -u
bin=$1; out=$2; shift 2
mkdir -p "$out"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/mem.log" &
smi=$!
timeout "${BENCH_TIMEOUT:-3000}" "$bin" "$@" --out "$out/result.json" 2>&1 | tee "$out/log.txt"
rc=${PIPESTATUS[0]}
kill "$smi" 2>/dev/null
peak=$(sort -n "$out/mem.log" | tail -1)
printf '{"source": "nvidia-smi memory.used, polled every 100 ms", "baseline_mib": %s, "peak_mib": %s}\n' "$base" "$peak" > "$out/memory.json"
cat "$out/memory.json"
rm -f "$out/mem.log"
exit "$rc"
