#!/usr/bin/env bash
# On a GPU machine, from the repository root: trains an experiment for its configured steps and
# then samples from the run, recording wall times and the device-memory peak of each phase.
#
#   scripts/gpu-train-sample.sh BINARY EXPERIMENT MASK OUTDIR [--backend cuda]
# Writes OUTDIR/{train.log, metrics.jsonl, sample.log, memory.json} and the sampled NIfTI files.
set -u
bin=$1; exp=$2; mask=$3; out=$4; shift 4
mkdir -p "$out"
source scripts/gpu-common.sh
run=$(mktemp -d)/run
p=$(poll_memory "$out/train.mem"); t0=$(date +%s.%N)
"$bin" train --experiment "$exp" --run-dir "$run" "$@" > "$out/train.log" 2>&1; rc_train=$?
t1=$(date +%s.%N); kill "$p"
cp "$run/metrics.jsonl" "$out/" 2>/dev/null
p=$(poll_memory "$out/sample.mem"); t2=$(date +%s.%N)
"$bin" sample --checkpoint "$run" --masks "$mask" --out "$out" "$@" > "$out/sample.log" 2>&1; rc_sample=$?
t3=$(date +%s.%N); kill "$p"
printf '{"train_wall_s": %.2f, "train_rc": %d, "train_peak_mib": %s, "sample_wall_s": %.2f, "sample_rc": %d, "sample_peak_mib": %s, "memory_source": "nvidia-smi memory.used, polled every 100 ms"}\n' \
  "$(python3 -c "print($t1 - $t0)")" "$rc_train" "$(peak_mib "$out/train.mem")" "$(python3 -c "print($t3 - $t2)")" "$rc_sample" "$(peak_mib "$out/sample.mem")" > "$out/memory.json"
rm -f "$out/train.mem" "$out/sample.mem"
cat "$out/memory.json"; tail -3 "$out/train.log"; tail -3 "$out/sample.log"
