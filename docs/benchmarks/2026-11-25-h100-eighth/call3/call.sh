#!/usr/bin/env bash
set -u
out=$OUT/c3; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune
mkdir -p /tmp/tune; tar xzf .device-cache/tune-cache.tgz -C /tmp/tune
xz -t .device-bin/medddpm-async.xz || exit 3; xz -dc .device-bin/medddpm-async.xz > /tmp/ma && chmod +x /tmp/ma
CHECK=1 bash scripts/.call2.sh c3 "bf16:async:200 tf32:sync:150 bf16:sync tf32:async bf16:async tf32:sync bf16:sync tf32:async"
exp=docs/benchmarks/2026-11-24-h100-seventh/whole-head-phantom-128.toml
for mode in async sync; do
  if [ $mode = sync ]; then export MEDDDPM_CUDNN_SYNC=1; else unset MEDDDPM_CUDNN_SYNC; fi
  s0=$(date +%s.%N)
  timeout 100 /tmp/ma train --experiment $exp --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --tune-cache /tmp/tune \
    --steps 100 --run-dir /tmp/train-$mode > $out/train-$mode.log 2>&1
  echo "train $mode exit $? wall $(echo "$(date +%s.%N) - $s0" | bc) s" | tee -a $out/train.txt
  cp /tmp/train-$mode/metrics.jsonl $out/metrics-$mode.jsonl 2>/dev/null
done
unset MEDDDPM_CUDNN_SYNC
cmp <(grep -o '"loss":[^,]*' $out/metrics-async.jsonl) <(grep -o '"loss":[^,]*' $out/metrics-sync.jsonl) && echo "100 losses identical" | tee -a $out/train.txt
tail -c 300 $out/metrics-async.jsonl
tar czf $OUT/c3.tgz -C $OUT c3
