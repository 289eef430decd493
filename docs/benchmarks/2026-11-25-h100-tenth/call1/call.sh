set -u
out=$OUT/c1; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; tar xzf .device-cache/tune-cache.tgz -C /tmp/tune
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > $out/machine.txt
xz -t .device-bin/medddpm-i14.xz || exit 3; xz -dc .device-bin/medddpm-i14.xz > /tmp/m && chmod +x /tmp/m
b() { name=$1; lim=$2; shift 2; echo "== $name $(date +%T)" >> $out/bench.log
  timeout $((lim+15)) /tmp/m bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
   --out $out/$name --tune-cache $MEDDDPM_TUNE_CACHE --timeout $lim --steps 5 --warmup 2 --no-breakdown "$@" >> $out/bench.log 2>&1; }
b brats-none 170 --model brats --size 144,192,192 --activation-checkpointing none
b brats-blocks 170 --model brats --size 144,192,192 --activation-checkpointing blocks
b wh-blocks 100 --model whole-head --size 128 --activation-checkpointing blocks
b wh-none 100 --model whole-head --size 128 --activation-checkpointing none
grep -E "micro-step median|sampling step median|peak|first .* took|==" $out/bench.log | head -40
for f in $out/*/results.jsonl; do python3 -c "
import json,sys
for l in open('$f'):
  r=json.loads(l); print('$f'.split('/')[-2], {k:r.get(k) for k in ['train_step_median_ms','sample_step_median_ms','peak_memory_mib','burn_memory_mib','status','message','first_train_step_s']})"; done
tar czf $OUT/tune-cache.tgz -C /tmp/tune .
