#!/usr/bin/env bash
# Twenty-fifth session, call 5: `medddpm train` (released whole-head settings, 8 phantoms, 40
# steps, data cache on) with the volumes' copies on an upload stream of their own (the default of
# this build) and, with MEDDDPM_UPLOAD_ASIDE=0, on the compute stream as before; alternating,
# three runs each, the second of each with --gpu-trace 10; nvidia-smi's peak per run.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
work=/tmp/c5; mkdir -p $work/logs
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $work/train.toml
for r in 1 2 3; do
  for aside in 1 0; do
    name=aside$aside-$r
    trace=""; [ $r = 2 ] && trace="--gpu-trace 10"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $work/mem.txt & mon=$!
    MEDDDPM_UPLOAD_ASIDE=$aside /tmp/medddpm train --experiment $work/train.toml --run-dir $work/run-$name \
      --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn $trace > $work/logs/train-$name.log 2>&1
    rc=$?; kill $mon; peak=$(sort -n $work/mem.txt | tail -1)
    cp $work/run-$name/metrics.jsonl $work/logs/metrics-$name.jsonl
    cp $work/run-$name/gpu-trace.json $work/logs/train-gpu-trace-$name.json 2>/dev/null
    python3 - $work/logs/metrics-$name.jsonl $name $rc $peak <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"{sys.argv[2]} rc={sys.argv[3]}: optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms; nvidia-smi peak {sys.argv[4]} MiB; final loss {m[-1].get('loss')}")
EOF2
    grep -E "GPU trace" $work/logs/train-$name.log | cut -c1-700
  done
done
tar czf $out/logs.tgz -C $work logs
