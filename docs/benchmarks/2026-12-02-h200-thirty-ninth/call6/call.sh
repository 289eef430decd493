#!/usr/bin/env bash
# Thirty-ninth session, call 6 (one H200): a measurement build (710e528 with
# measurement-build.patch, never committed) that also marks the thread hand-offs inside burn's
# CUDA backend while the bench traces: each blocking call handed on and answered (caller,
# burn-fusion's runner, the device runner), each runner's batch of tasks started and ended, and
# each CUDA event synchronisation's return. The bf16 bench once; the marks inside the longest
# idle gaps of the synchronised training and sampling steps say where the 1.3-1.8 ms between
# the GPU's last kernel and the synchronisation's return, and the 1-3 ms before a step's first
# kernel, are spent.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
W=/tmp/c6; mkdir -p $W
machine_info $W
bench_run bf16 100 --precisions bf16 --layouts ndhwc --conv-engine cudnn
python3 - $W/bench-bf16/results.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    for k in ('train_gpu', 'sample_gpu'):
        g = r.get(k) or {}
        h = g.get('host') or {}
        print(k, 'first work', round(h.get('start_wait_ms', 0), 2), 'back', round(h.get('sync_return_ms', 0), 2))
        for x, y in zip((g.get('idle') or {}).get('longest', [])[:5], h.get('gaps', [])[:5]):
            print(f"  {x['us']:.0f} us after {x['after'][:40]} before {x['before'][:40]}: {y}")
PY
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c6
echo "total $SECONDS s"
