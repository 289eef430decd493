#!/usr/bin/env bash
# Thirty-first session, call 5 (two H200s): the several-device stop on CUDA with NCCL.
# `medddpm train --devices 0,1` (processes) with the thirtieth session's call-1 settings
# (whole-head 128^3 phantoms, bf16, released settings, 10 steps): its losses against that
# call's (the per-step stop agreement must change nothing), its optimizer step time; then a
# long run of the same, SIGTERM to its process group after its fifth logged step: the exit
# status, the last logged step against the latest checkpoint, no GPU process left; the same with
# --launch threads. Binary: this session's release build after the stop agreement.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c5; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
/tmp/medddpm plan whole-head-128 --device cuda:0 --precision bf16 > $w/plan-whole-head-bf16.txt 2>&1
grep -E "^training|^sampling|^fits" $w/plan-whole-head-bf16.txt | cut -c1-160
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 10|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-processes --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0,1 --launch processes > $w/train-processes.log 2>&1
echo "train --devices 0,1 processes rc=$?"
cp $w/run-processes/metrics.jsonl $w/metrics-processes.jsonl
python3 -c "
import json
m=[json.loads(l) for l in open('$w/metrics-processes.jsonl')]
print('  losses', [round(x['loss'],7) for x in m])
t=[b['elapsed_s']-a['elapsed_s'] for a,b in zip(m[2:],m[3:])]
print('  optimizer step (steps 3-10) median ms', round(sorted(t)[len(t)//2]*1000,1))" 2>&1 | cut -c1-300
sed -e 's|^steps = .*|steps = 100000|' -e 's|^save_every = .*|save_every = 100000|' $w/train.toml > $w/long.toml
for launch in processes threads; do
  setsid /tmp/medddpm train --experiment $w/long.toml --run-dir $w/long-$launch --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn --devices 0,1 --launch $launch > $w/long-$launch.log 2>&1 &
  lead=$!
  for i in $(seq 1 600); do
    [ -f $w/long-$launch/metrics.jsonl ] && [ $(wc -l < $w/long-$launch/metrics.jsonl) -ge 5 ] && break
    sleep 0.2
  done
  kill -TERM -- -$lead
  wait $lead; rc=$?
  sleep 2
  echo "long $launch: SIGTERM to the group after step $(wc -l < $w/long-$launch/metrics.jsonl) -> rc=$rc; latest $(cat $w/long-$launch/checkpoints/latest 2>/dev/null); logged steps $(wc -l < $w/long-$launch/metrics.jsonl); GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
  tail -2 $w/long-$launch.log | cut -c1-250
  /tmp/medddpm inspect $w/long-$launch > $w/inspect-$launch.log 2>&1; echo "  inspect rc=$?"
done
rm -rf $w/run-* $w/long-*/checkpoints
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c5
