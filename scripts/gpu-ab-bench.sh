#!/usr/bin/env bash
# A/B of two or more builds on one GPU machine (run-to-run and machine-to-machine spread is
# several ms, so a change is judged against its predecessor in the same call). From the
# repository root on the GPU machine, each build carried as .device-bin/medddpm-NAME.xz and the
# tuning cache in $MEDDDPM_TUNE_CACHE:
#   [STEPS=10 WARMUP=2] scripts/gpu-ab-bench.sh OUTDIR "old new" "bf16 tf32" [extra bench arguments...]
# Cells run interleaved (each precision: every build in turn). Writes OUTDIR/ab.log and
# OUTDIR/ab.jsonl (each cell's records after a `# NAME PRECISION` line).
set -u
out=$1; builds=$2; precisions=$3; shift 3
mkdir -p "$out"
for b in $builds; do
  xz -t ".device-bin/medddpm-$b.xz" || { echo "carried build $b is damaged"; exit 3; }
  xz -dc ".device-bin/medddpm-$b.xz" > "/tmp/medddpm-$b" && chmod +x "/tmp/medddpm-$b"
done
for p in $precisions; do
  for b in $builds; do
    echo "== $b $p" >> "$out/ab.log"
    timeout 140 "/tmp/medddpm-$b" bench --backends cuda --precisions "$p" --layouts ndhwc \
      --conv-engine cudnn --out "/tmp/ab-$b-$p" --tune-cache "$MEDDDPM_TUNE_CACHE" --timeout 135 \
      --size 128 --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" --no-breakdown "$@" >> "$out/ab.log" 2>&1
    (echo "# $b $p"; cat "/tmp/ab-$b-$p/results.jsonl") >> "$out/ab.jsonl"
  done
done
grep -E "^== |micro-step median|sampling step median" "$out/ab.log"
