#!/usr/bin/env bash
# On the GPU machine, from the repository root, with the release binary carried as
# .device-bin/medddpm.xz: trains EXPERIMENT once per precision and keeps each run's
# metrics.jsonl (loss per optimizer step), log and nvidia-smi memory peak.
#   scripts/gpu-loss-curves.sh OUTDIR EXPERIMENT "bf16 tf32" SECONDS [train arguments...]
# Writes OUTDIR/<precision>/{metrics.jsonl, train.log, peak-mib.txt}; each run gets SECONDS.
set -u
out=$1; exp=$2; precisions=$3; limit=$4; shift 4
source scripts/gpu-common.sh
[ -x /tmp/medddpm ] || { xz -dc .device-bin/medddpm.xz > /tmp/medddpm && chmod +x /tmp/medddpm; }
for p in $precisions; do
  mkdir -p "$out/$p"; run=$(mktemp -d)/run
  poll=$(poll_memory "$out/$p/mem.txt")
  timeout "$limit" /tmp/medddpm train --experiment "$exp" --run-dir "$run" --precision "$p" "$@" \
    > "$out/$p/train.log" 2>&1
  echo "exit $?" >> "$out/$p/train.log"
  kill "$poll"; peak_mib "$out/$p/mem.txt" > "$out/$p/peak-mib.txt"; rm "$out/$p/mem.txt"
  cp "$run/metrics.jsonl" "$out/$p/" 2>/dev/null
  rm -rf "$run"
  echo "== $p: $(wc -l < "$out/$p/metrics.jsonl" 2>/dev/null) steps, peak $(cat "$out/$p/peak-mib.txt") MiB"; tail -2 "$out/$p/train.log"
done
