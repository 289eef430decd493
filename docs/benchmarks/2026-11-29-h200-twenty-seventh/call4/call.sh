#!/usr/bin/env bash
# Twenty-seventh session, call 4 (a diagnostic build of call 2's code: `--features
# cuda,host-profile`, symbols kept): where the host's time goes in the trainer's optimizer
# step (`bench --devices 0 --host-profile`: medddpm_train::train_on on one H200, one volume per
# micro-batch, 3 + 20 optimizer steps, the host's call stacks sampled over the timed steps),
# each thread's functions summarised by scripts/host-profile-summary.py.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c4; mkdir -p $w
timeout 300 /tmp/medddpm bench --devices 0 --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --model whole-head --size 128 --warmup 3 --steps 20 --host-profile --out $w/dev > $w/bench-devices.log 2>&1
echo "bench --devices 0 rc=$?"; grep -E "device\(s\)|rror" $w/bench-devices.log | cut -c1-600
for f in $w/dev/host-profile-*.folded; do
  [ -f "$f" ] || continue
  python3 scripts/host-profile-summary.py "$f" --top 40 > $w/$(basename "$f" .folded)-summary.txt
  head -150 $w/$(basename "$f" .folded)-summary.txt | cut -c1-200
  xz -k -T2 "$f"; mv "$f.xz" $w/
done
rm -rf $w/dev/scaling-run-*
tar czf $out/logs.tgz -C /tmp c4
pack_tune_cache $out
