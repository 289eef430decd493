#!/usr/bin/env bash
# Fortieth session, call 2 (the machine of call 1, still warm): the bench's timed micro-step with the next step's working
# model made after its update (new, .device-bin/medddpm.xz) against the same code without that
# change (old, .device-bin/medddpm-old.xz), interleaved again: old, new, three times each.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
mv /tmp/medddpm /tmp/medddpm-new
xz -t .device-bin/medddpm-old.xz && xz -dc .device-bin/medddpm-old.xz > /tmp/medddpm-old && chmod +x /tmp/medddpm-old
W=/tmp/c2; mkdir -p $W
machine_info $W
for run in old-3 new-3 old-4 new-4 old-5 new-5; do
  cp /tmp/medddpm-${run%-*} /tmp/medddpm
  bench_run $run 60 --precisions bf16 --layouts ndhwc --conv-engine cudnn
  grep -E "host per training" $W/bench-$run.log | cut -c1-260
done
pack_tune_cache $out; rm -f $out/compiled.txz
for run in old-3 new-3 old-4 new-4 old-5 new-5; do cp $W/bench-$run/results.jsonl $out/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
