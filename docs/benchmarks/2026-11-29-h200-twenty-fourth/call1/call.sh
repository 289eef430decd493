#!/usr/bin/env bash
# On the GPU machine, from the repository root (issue 36, twenty-fourth session): the bf16
# bench steps under each memory-pool layout the experiment binary offers (MEDDDPM_POOLS), then
# the engine call's parts with the layout named in POOLS (default: classes).
#   scripts/gpu-pools-call.sh OUTDIR "VARIANTS" "PARTS"
set -u
out=$1; variants=${2:-"sliced classes"}; parts=${3:-""}
source scripts/gpu-common.sh
unpack_binary; tune_cache
work=$(mktemp -d); mkdir -p "$work/logs"
for v in $variants; do
  MEDDDPM_POOLS=$v /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out "$work/pools-$v" --timeout 300 > "$work/logs/pools-$v.log" 2>&1
  echo "pools=$v rc=$?"
  python3 - "$work/pools-$v/results.jsonl" <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("  train %.1f ms (issue %.1f), sample %.1f ms, peak %s MiB, burn %s, first %.2f/%.2f s" % (r.get('train_step_median_ms') or 0, r.get('train_issue_median_ms') or 0, r.get('sample_step_median_ms') or 0, r.get('peak_memory_mib'), r.get('burn_memory_mib'), r.get('first_train_step_s') or 0, r.get('first_sample_step_s') or 0))
    g = r.get('train_gpu') or {}
    print("  GPU busy %.1f ms, %s launches" % (g.get('busy_ms') or 0, g.get('launches')))
EOF2
  cp -r "$work/pools-$v" "$work/logs/"
done
tar czf "$out/pools-logs.tgz" -C "$work" logs
if [ -n "$parts" ]; then
  MEDDDPM_POOLS=${POOLS:-classes} bash scripts/gpu-engine-call.sh "$out" "$parts"
else
  pack_tune_cache "$out"
fi
