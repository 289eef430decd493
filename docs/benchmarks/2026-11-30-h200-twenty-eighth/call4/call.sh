#!/usr/bin/env bash
# Twenty-eighth session, call 4 (the committed code: the CUDA driver's cache now set before the
# driver starts). The driver cache: a short bench with an empty HOME fills the tuning cache's
# cuda-driver-jit/ (the tuning results and PTX carried from call 3), then the same bench with
# another empty HOME (so nothing of ~/.nv helps) gives the first steps of a machine that has
# only the carried caches. Then the bf16 bench with CUDA graphs and the PyTorch reference under
# torch.compile (default mode) on the same GPU.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c4; mkdir -p $w /tmp/h1 /tmp/h2
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $w/machine.txt
for h in h1 h2; do
  HOME=/tmp/$h timeout 100 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 1 --steps 3 --out $w/first-$h --timeout 90 > $w/bench-first-$h.log 2>&1
  echo "bench HOME=/tmp/$h rc=$?"; grep -E "first .*(took|threads)" $w/bench-first-$h.log | cut -c1-300
  du -sh /tmp/tune/cuda-bf16/cuda-driver-jit /tmp/$h/.nv 2>&1
done
timeout 150 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
  --warmup 3 --steps 10 --cuda-graphs --out $w/bench --timeout 140 > $w/bench-bf16.log 2>&1
echo "bench rc=$?"; grep -E "median|first .* took" $w/bench-bf16.log | cut -c1-300
PYTHONUNBUFFERED=1 timeout 280 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $w/torch-compile1.json 2> $w/torch-compile1.log
echo "torch compile=1 rc=$?"
python3 - $w/torch-compile1.json <<'EOF2'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  {k}: wall {t['wall_ms_median']:.1f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
EOF2
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c4
pack_tune_cache $out
ls -la $out
