#!/usr/bin/env bash
# One GPU-machine call that judges a change: the new build's kernels against the CPU twins,
# then an interleaved A/B of two builds (two rounds, the order swapped in the second), then one
# profiled bench of the new build (its training breakdown), then the caches back.
#
# From the repository root on the GPU machine, builds carried as .device-bin/medddpm-NEW.xz and
# .device-bin/medddpm-OLD.xz:
#   [STEPS=10 WARMUP=2 PRECISIONS="bf16 tf32" CHECK="bf16"] scripts/gpu-ab-call.sh OUTDIR NEW OLD
# The tuning cache: $MEDDDPM_TUNE_CACHE (default .device-cache/tune), seeded from
# scripts/device-cache/tune-h100.tgz when empty, and from .device-cache/tune-cache.tgz
# and .device-cache/driver-jit.txz when carried. Writes OUTDIR/machine.txt,
# OUTDIR/check-kernels-P.{json,log}, OUTDIR/ab.{log,jsonl} (scripts/gpu-ab-bench.sh),
# OUTDIR/breakdown/ and OUTDIR/breakdown.log, OUTDIR/tune-cache.tgz and OUTDIR/driver-jit.txz.
set -u
out=$1; new=$2; old=$3
mkdir -p "$out" && out=$(cd "$out" && pwd)
export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-$PWD/.device-cache/tune}
mkdir -p "$MEDDDPM_TUNE_CACHE"
if [ -f .device-cache/tune-cache.tgz ]; then
  tar xzf .device-cache/tune-cache.tgz -C "$MEDDDPM_TUNE_CACHE"
else
  tar xzf scripts/device-cache/tune-h100.tgz -C "$MEDDDPM_TUNE_CACHE"
fi
[ -f .device-cache/driver-jit.txz ] && tar xJf .device-cache/driver-jit.txz -C "$MEDDDPM_TUNE_CACHE"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; uptime; } > "$out/machine.txt"
for b in "$new" "$old"; do
  xz -t ".device-bin/medddpm-$b.xz" || { echo "carried build $b is damaged"; exit 3; }
done
xz -dc ".device-bin/medddpm-$new.xz" > /tmp/medddpm && chmod +x /tmp/medddpm
for p in ${CHECK:-bf16}; do
  timeout 150 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision "$p" \
    --scale 4 --out "$out/check-kernels-$p.json" > "$out/check-kernels-$p.log" 2>&1
  echo "check-kernels $p: exit $?"; grep -c " ok$" "$out/check-kernels-$p.log"
  grep "OUTSIDE" "$out/check-kernels-$p.log"
done
precisions=${PRECISIONS:-bf16 tf32}
scripts/gpu-ab-bench.sh "$out" "$new $old" "$precisions"
scripts/gpu-ab-bench.sh "$out" "$old $new" "$precisions"
for p in $precisions; do
  timeout 150 /tmp/medddpm bench --backends cuda --precisions "$p" --layouts ndhwc \
    --conv-engine cudnn --out "$out/breakdown" --tune-cache "$MEDDDPM_TUNE_CACHE" --timeout 145 \
    --size 128 --steps "${STEPS:-10}" --warmup "${WARMUP:-2}" >> "$out/breakdown.log" 2>&1
  grep -E "micro-step median|training breakdown|peak" "$out/breakdown.log" | tail -4
done
tar czf "$out/tune-cache.tgz" --exclude=probe-reference --exclude=cuda-driver-jit \
  -C "$MEDDDPM_TUNE_CACHE" .
(cd "$MEDDDPM_TUNE_CACHE" && ls -d */cuda-driver-jit 2>/dev/null | XZ_OPT=-T0 tar cJf "$out/driver-jit.txz" -T -)
