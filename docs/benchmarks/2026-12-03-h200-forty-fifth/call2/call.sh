#!/usr/bin/env bash
# Call 2 (one H200): where the host's threads spend a training micro-step now, and every
# kernel of it. prof: a diagnostic build (--features cuda,host-profile, symbols kept) of the
# session's code; `bench --host-profile` (bf16, cuDNN, 40 timed steps) writes the folded stacks,
# summarised by scripts/host-profile-summary.py; the bench's JSON lists every kernel of the
# traced steps with its launches. Then, with new (the release build), TF32 with cuDNN and bf16
# with our CubeCL convolutions, as a user would run them.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new prof; tune_cache; cupti_library
W=/tmp/c2; rm -rf $W; mkdir -p $W
machine_info $W
t0=$SECONDS
timeout 200 /tmp/medddpm-prof bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 40 --host-profile --out $W/bench-prof --timeout 195 > $W/bench-prof.log 2>&1
echo "bench prof rc=$? ($((SECONDS - t0)) s)"; grep -E "step median" $W/bench-prof.log | cut -c1-200
for f in $W/bench-prof/host-profile-*.folded; do
  [ -f "$f" ] || continue
  cp "$f" $W/
  python3 scripts/host-profile-summary.py "$f" --top 40 > $W/$(basename "$f" .folded)-summary.txt
  grep -E "^== thread" $W/$(basename "$f" .folded)-summary.txt
done
cp $W/bench-prof/results.jsonl $W/results-prof.jsonl
python3 - $W/results-prof.jsonl <<'PY'
import json, sys
g = json.loads(open(sys.argv[1]).readline())['train_gpu']
print(f"  {len(g['top'])} kernel names, {g['launches']:.0f} launches a step")
for t in sorted(g['top'], key=lambda t: -t['calls'])[:20]:
    print(f"  {t['calls']:6.1f} calls {t['ms']:7.3f} ms  {t['name'][:90]}")
PY
BIN=/tmp/medddpm-new bench_run tf32 90 --precisions tf32 --layouts ndhwc --conv-engine cudnn
BIN=/tmp/medddpm-new bench_run cubecl 90 --precisions bf16 --layouts ndhwc --conv-engine cubecl
for run in tf32 cubecl; do cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
