#!/usr/bin/env bash
# On the GPU machine (Firecracker runtime: ncu reads counters there), from the repository root:
# the GPU time of every kernel of STEPS training micro-steps of EXPERIMENT, summed by kernel name.
#   scripts/gpu-ncu-train.sh OUTDIR EXPERIMENT STEPS SECONDS [train arguments...]
# Writes OUTDIR/ncu.csv (one row per kernel launch) and OUTDIR/ncu-summary.md.
set -u
out=$1; exp=$2; steps=$3; limit=$4; shift 4
mkdir -p "$out"
[ -x /tmp/medddpm ] || { xz -dc .device-bin/medddpm.xz > /tmp/medddpm && chmod +x /tmp/medddpm; }
run=$(mktemp -d)/run
timeout "$limit" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  --log-file "$out/ncu.csv" /tmp/medddpm train --experiment "$exp" --run-dir "$run" \
  --steps "$steps" --save-every 1000000 "$@" > "$out/train.log" 2>&1
echo "exit $?" >> "$out/train.log"
rm -rf "$run"
python3 scripts/ncu-summary.py "$out/ncu.csv" 60 > "$out/ncu-summary.md"
head -70 "$out/ncu-summary.md"
