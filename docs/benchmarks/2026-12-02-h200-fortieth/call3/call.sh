#!/usr/bin/env bash
# Fortieth session, call 3 (one H200): where the host's threads spend a bf16 training
# micro-step now (issue 36: burn-fusion's thread runs about as long as the GPU's work, and a
# synchronised step idles the GPU 6-7 ms): `bench --host-profile` of a diagnostic build
# (`cargo build --release -p medddpm --features cuda,host-profile`, symbols kept), 20 timed
# steps, the folded stacks summarised per thread by scripts/host-profile-summary.py.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
W=/tmp/c3; mkdir -p $W
machine_info $W
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 20 --host-profile --out $W/bench --timeout 145 > $W/bench.log 2>&1
echo "bench rc=$? ($SECONDS s)"
grep -E "step median|host threads|host per training" $W/bench.log | cut -c1-400
for f in $W/bench/host-profile-*.folded; do
  [ -f "$f" ] || continue
  cp "$f" $out/
  python3 scripts/host-profile-summary.py "$f" --top 30 > $out/$(basename "$f" .folded)-summary.txt
  head -120 $out/$(basename "$f" .folded)-summary.txt | cut -c1-240
done
cp $W/bench/results.jsonl $out/ 2>/dev/null
rm -f $W/bench/*.png
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
