#!/usr/bin/env bash
# Issue 16's control experiment: is the slower step of two replicas in one process the
# process's doing, or the machine's? Times the one-GPU bf16 training step (whole-head 128^3,
# cuDNN, channels-last) on GPU 0 alone, then in two processes at once (GPU 0 and GPU 1, each
# its own process, nothing shared), then two replicas in one process (`bench --devices 0,1`).
# Usage, on a machine of two GPUs, from the repository root, after scripts/gpu-scaling.sh has
# set up the binary and tuning cache (run it with an empty cell list):
#   scripts/gpu-two-processes.sh OUTDIR [ROUNDS]
set -u
out=$1; rounds=${2:-2}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-/tmp/tune}
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
one() { # NAME GPU DEVICES
  CUDA_VISIBLE_DEVICES=$2 timeout 150 /tmp/medddpm bench --devices "$3" --backends cuda \
    --precisions bf16 --layouts ndhwc --conv-engine cudnn --model whole-head --size 128 \
    --warmup 3 --steps 10 --out "/tmp/two-$1" > "$out/$1.log" 2>&1
  echo "rc $?" >> "$out/$1.log"
}
for r in $(seq 1 "$rounds"); do
  one alone-$r 0 0
  one pair-a-$r 0 0 & one pair-b-$r 1 0 & wait
  one inproc-$r 0,1 0,1
  for n in alone-$r pair-a-$r pair-b-$r inproc-$r; do
    echo "$n: $(grep -E 'device\(s\):' "$out/$n.log" | sed 's/; per device.*//' | tr '\n' ' ')"
    cat /tmp/two-$n/scaling.jsonl >> "$out/two.jsonl" 2>/dev/null
  done
done
(cd "$out" && tar czf two-logs.tgz *.log && rm -f *.log)
