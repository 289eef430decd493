set -u
out=$OUT/c5; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i14.xz > /tmp/m && chmod +x /tmp/m; }
{ nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; } > $out/machine.txt
for r in blocks none blocks none; do
timeout 100 /tmp/m bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --out /tmp/w$r --tune-cache $MEDDDPM_TUNE_CACHE --timeout 90 --steps 5 --warmup 2 --no-breakdown --model whole-head --size 128 --activation-checkpointing $r >> $out/bench.log 2>&1
done
cp /tmp/wblocks/results.jsonl $out/wh-blocks.jsonl; cp /tmp/wnone/results.jsonl $out/wh-none.jsonl
for f in $out/*.jsonl; do python3 -c "
import json
for l in open('$f'):
  r=json.loads(l); print('$f'.split('/')[-1], {k:r.get(k) for k in ['train_step_median_ms','sample_step_median_ms','peak_memory_mib','status','first_train_step_s']})"; done
