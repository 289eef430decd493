set -u
out=$OUT/c4; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i14.xz > /tmp/m && chmod +x /tmp/m; }
{ nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; du -sh /tmp/tune; } > $out/machine.txt
timeout 300 /tmp/m bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --out /tmp/bn --tune-cache $MEDDDPM_TUNE_CACHE --timeout 280 --steps 5 --warmup 2 --no-breakdown --model brats --size 144,192,192 --activation-checkpointing none > $out/bench.log 2>&1
cp /tmp/bn/results.jsonl $out/brats-none.jsonl
grep -E "step median|first .* took|==" $out/bench.log
python3 -c "
import json
for l in open('$out/brats-none.jsonl'):
  r=json.loads(l); print({k:r.get(k) for k in ['train_step_median_ms','sample_step_median_ms','peak_memory_mib','status','first_train_step_s','message']})"
