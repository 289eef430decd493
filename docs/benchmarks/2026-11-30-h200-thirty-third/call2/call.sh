#!/usr/bin/env bash
# Thirty-third session, call 2 (one H200): the new binary's bf16 bench (synchronised medians and
# back to back) beside the PyTorch reference under torch.compile (default mode; tuned: bf16
# autocast, attention checkpoint removed, fused Adam) in the same call, then `medddpm train`
# with the released whole-head settings, and check-kernels with our CubeCL convolutions.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cupti=$(find "$site/nvidia" -name 'libcupti.so*' 2>/dev/null | sort | head -1)
[ -n "$cupti" ] && export MEDDDPM_CUPTI=$cupti
w=/tmp/c2; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())'; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
bench() {
  local b=$1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$b.txt &
  local smi=$!
  timeout 80 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$b --timeout 75 > $w/bench-$b.log 2>&1
  echo "bench $b rc=$? whole-GPU peak $(sort -n $w/smi-bench-$b.txt | tail -1) MiB"; kill $smi
  grep -E "median" $w/bench-$b.log | cut -c1-250
  find $w/bench-$b -name results.png -delete
  cp -r $w/bench-$b $w/bench-$b.log $w/smi-bench-$b.txt $out/logs/ 2>/dev/null
}
bench ours1
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-torch.txt &
smi=$!
PYTHONUNBUFFERED=1 timeout 240 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $w/torch-compile1.json 2> $w/torch-compile1.log
echo "torch compile=1 rc=$? whole-GPU peak $(sort -n $w/smi-torch.txt | tail -1) MiB"; kill $smi
cp $w/torch-compile1.json $w/torch-compile1.log $w/smi-torch.txt $out/logs/
python3 - $w/torch-compile1.json <<'EOP'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    for k in ('train', 'sample'):
        t = r.get(k)
        if t: print(f"  {k}: wall {t['wall_ms_median']:.1f} ms, GPU busy {t['gpu_busy_ms']:.1f} ms, {t['launches']:.0f} launches")
    if 'error' in r: print('  error', r['error'])
EOP
bench ours2
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
t0=$(date +%s.%N)
timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $w/train.log 2>&1
echo "train rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
cp $w/run/metrics.jsonl $out/logs/train-metrics.jsonl 2>/dev/null; cp $w/train.log $w/train.toml $out/logs/
python3 - $w/run/metrics.jsonl <<'EOP'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"  optimizer step: median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms over steps {m[5]['step']}-{m[-1]['step']}")
EOP
t0=$(date +%s)
timeout 100 /tmp/medddpm check-kernels --backend cuda --conv-engine cubecl --precision bf16 > $w/check-kernels-cubecl.log 2>&1
echo "check-kernels cubecl bf16 rc=$? ($(( $(date +%s) - t0 )) s)"; grep -vE "^\[tune\]" $w/check-kernels-cubecl.log | tail -2 | cut -c1-400
cp $w/check-kernels-cubecl.log $out/logs/
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
pack_tune_cache $out
ls -la $out
