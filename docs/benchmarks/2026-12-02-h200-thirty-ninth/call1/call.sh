#!/usr/bin/env bash
# Thirty-ninth session, call 1 (one H200), the release build named in
# .device-bin/binary-commit.txt: the bf16 bench twice with the GPU trace now holding the host's
# side (CUPTI's driver-call records and the bench's marks in each step: when the first GPU work
# of a synchronised step starts, when the synchronisation returns, what the host was in during
# the longest idle gaps), and `medddpm train --gpu-trace 4` (released whole-head settings, 14
# steps) for the same view of the trainer's optimizer step. CUDA's cupti_driver_cbid.h is copied
# out where the machine has it, to name the driver calls the bench prints by number.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
header=$(find / -name cupti_driver_cbid.h 2>/dev/null | head -1)
[ -n "$header" ] && cp "$header" $out/ && echo "header: $header"
W=/tmp/c1; mkdir -p $W
machine_info $W
bench_run bf16-a 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
grep -E "^host per|GPU per" $W/bench-bf16-a.log | cut -c1-900
bench_run bf16-b 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
grep -E "^host per" $W/bench-bf16-b.log | cut -c1-900
if [ $SECONDS -lt 470 ]; then
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 14|" -e "s|^save_every = .*|save_every = 14|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 --gpu-trace 4 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
grep -E "GPU trace" $W/train.log | cut -c1-1200
cp $W/run/gpu-trace.json $W/train-gpu-trace.json 2>/dev/null
python3 - $W/run/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
else echo "train skipped ($SECONDS s)"; fi
rm -rf $W/run/checkpoints $W/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
