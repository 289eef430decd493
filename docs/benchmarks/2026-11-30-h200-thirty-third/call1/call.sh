#!/usr/bin/env bash
# Thirty-third session, call 1 (one H200): kernels' shapes and strides in their launch
# parameters (vendored cubecl-cpp/cubecl-cuda, 6f31b03) against the binary before (7ee9c0f):
# check-kernels bf16 with cuDNN (every kernel compiled afresh: the PTX cache has a new name), then the bf16 bench with the GPU traced (CUPTI), alternating
# new, old, new, old, new.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c1; mkdir -p $w; mkdir -p $out/logs
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
t0=$(date +%s)
timeout 150 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 > $w/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($(( $(date +%s) - t0 )) s)"; grep -vE "^\[tune\]" $w/check-kernels-cudnn.log | tail -2 | cut -c1-400
cp $w/check-kernels-cudnn.log $out/logs/
xz -dc .device-bin/medddpm-prev.xz > /tmp/medddpm-old && chmod +x /tmp/medddpm-old
for b in new old new2 old2 new3; do
  bin=/tmp/medddpm; case $b in old*) bin=/tmp/medddpm-old ;; esac
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$b.txt &
  smi=$!
  timeout 75 $bin bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$b --timeout 70 > $w/bench-$b.log 2>&1
  echo "bench $b rc=$? whole-GPU peak $(sort -n $w/smi-bench-$b.txt | tail -1) MiB"; kill $smi
  python3 - $w/bench-$b/results.jsonl <<'EOP'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    g = r.get('train_gpu') or {}; s = r.get('sample_gpu') or {}
    top = {t['name'][:40]: t['calls'] for t in g.get('top', []) if 'memcpy' in t['name']}
    print("  train %.2f ms (GPU busy %.2f, %d launches, idle short %.2f long %.2f), sample %.2f ms (busy %.2f, %d launches), first %.1f / %.1f s; %s" % (
        r.get('train_step_median_ms') or 0, g.get('busy_ms', 0), g.get('launches', 0),
        (g.get('idle') or {}).get('short_ms', 0), (g.get('idle') or {}).get('long_ms', 0),
        r.get('sample_step_median_ms') or 0, s.get('busy_ms', 0), s.get('launches', 0),
        r.get('first_sample_step_s') or 0, r.get('first_train_step_s') or 0, top))
EOP
  find $w/bench-$b -name results.png -delete
  cp -r $w/bench-$b $w/bench-$b.log $w/smi-bench-$b.txt $out/logs/ 2>/dev/null
done
cp $w/machine.txt $out/logs/
pack_tune_cache $out
ls -la $out
