#!/usr/bin/env bash
# Thirty-eighth session, call 5 (one H200): the release build of this session's final code (see
# .device-bin/binary-commit.txt) beside the PyTorch reference under torch.compile (default
# mode; tuned: bf16 autocast, attention checkpoint removed, fused Adam) in the same call, as
# issue 36 asks: our bf16 bench, scripts/torch-gpu-profile.py --compile 1 (the GPL reference
# from .device-peer, run and not copied), our bench again. nvidia-smi beside each.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
W=/tmp/c5; mkdir -p $W
machine_info $W
bench_run ours-a 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $W/smi-torch.txt & smi=$!
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $W/torch-compile1.json 2> $W/torch-compile1.log
echo "torch compile=1 rc=$? whole-GPU peak $(sort -n $W/smi-torch.txt | tail -1) MiB ($SECONDS s)"; kill $smi
python3 - $W/torch-compile1.json <<'EOP'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  torch {k}: wall {t['wall_ms_median']:.2f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
EOP
bench_run ours-b 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c5
echo "total $SECONDS s"
