#!/usr/bin/env bash
# Call 4 (one H200): the first steps on a fresh cache with each hand-over policy. Each run gets
# its own copy of the committed tuning results and nothing compiled (no cubecl PTX, no CUDA
# driver cache), so each compiles every kernel: w0 (MEDDDPM_PARTIAL_BATCH_US=0, the default)
# and full (MEDDDPM_FULL_BATCHES=1, cubecl's batches of 32), interleaved, the bf16 bench with
# cuDNN cut to its first steps and one timed step.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; cupti_library
W=/tmp/c4; rm -rf $W; mkdir -p $W
machine_info $W
for run in w0-1 full-1 w0-2 full-2; do
  cache=/tmp/tune-$run; rm -rf $cache; mkdir -p $cache
  tar xzf scripts/device-cache/tune-h100.tgz -C $cache
  env=MEDDDPM_PARTIAL_BATCH_US=0; [ ${run%-*} = full ] && env=MEDDDPM_FULL_BATCHES=1
  t0=$SECONDS
  env $env MEDDDPM_TUNE_CACHE=$cache timeout 120 /tmp/medddpm-new bench --backends cuda --precisions bf16 \
    --layouts ndhwc --conv-engine cudnn --warmup 0 --steps 1 --no-breakdown --out $W/bench-$run \
    --timeout 115 > $W/bench-$run.log 2>&1
  echo "$run rc=$? ($((SECONDS - t0)) s): $(grep -hoE 'first (sampling step|training micro-step) took [0-9.]+ s' $W/bench-$run.log | tr '\n' ' ')"
  cp $W/bench-$run/results.jsonl $W/results-$run.jsonl 2>/dev/null
done
tar czf $out/logs.tgz -C /tmp c4
echo "total $SECONDS s"
