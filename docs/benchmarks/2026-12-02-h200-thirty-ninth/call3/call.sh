#!/usr/bin/env bash
# Thirty-ninth session, call 3 (one H200), the release build named in
# .device-bin/binary-commit.txt (the losses and the gradient norm read together, once a step;
# the next step's working model made before that wait): `medddpm train --gpu-trace 4` twice
# (released whole-head settings, 14 steps; against call 2's 119.4-119.5 ms and call 1's 125.1),
# then our bf16 bench, the PyTorch reference under torch.compile (default mode; tuned: bf16
# autocast, attention checkpoint removed, fused Adam; the GPL reference from .device-peer, run
# and not copied) and our bench again, in the same call, as issue 36 asks.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
W=/tmp/c3; mkdir -p $W
machine_info $W
for t in a b; do
if [ $SECONDS -lt 200 ]; then
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 14|" -e "s|^save_every = .*|save_every = 14|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
smi=$(poll_memory $W/smi-train-$t.txt 0)
timeout 80 /tmp/medddpm train --experiment $W/train.toml --run-dir $W/run-$t --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 --gpu-trace 4 > $W/train-$t.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train-$t.txt) MiB ($SECONDS s)"; kill $smi
grep -E "GPU trace" $W/train-$t.log | cut -c1-1200
cp $W/run-$t/gpu-trace.json $W/train-$t-gpu-trace.json 2>/dev/null
python3 - $W/run-$t/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
g = json.load(open(sys.argv[1].replace('metrics.jsonl', 'gpu-trace.json'))).get('host') or {}
print('  marks (ms after the step start):', {k: round(v, 2) for k, v in (g.get('marks_ms') or {}).items()})
for line in (g.get('gaps') or [])[:6]: print('  gap:', line)
PY
else echo "train $t skipped ($SECONDS s)"; fi
done
bench_run ours-a 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
grep -E "host per" $W/bench-ours-a.log | cut -c1-400
smi=$(poll_memory $W/smi-torch.txt 0)
PYTHONUNBUFFERED=1 timeout 300 python3 scripts/torch-gpu-profile.py --config bf16_fix --compile 1 \
  --steps 10 --profiled 3 > $W/torch-compile1.json 2> $W/torch-compile1.log
echo "torch compile=1 rc=$? whole-GPU peak $(peak_mib $W/smi-torch.txt) MiB ($SECONDS s)"; kill $smi
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
grep -E "host per" $W/bench-ours-b.log | cut -c1-400
rm -rf $W/run-*/checkpoints $W/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
