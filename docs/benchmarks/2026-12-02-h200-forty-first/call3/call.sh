#!/usr/bin/env bash
# Call 3 (one H200): the release build of this session's final code (.device-bin/medddpm.xz,
# the commit in .device-bin/binary-commit.txt; issue 37's merges of duplicated code included):
# check-kernels bf16 with cuDNN, the bf16 bench twice, `medddpm train` (released whole-head
# settings, 12 steps) and `medddpm sample` (one mask, 250 DDPM steps) from its checkpoint, as a
# user runs them.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; cupti_library
W=/tmp/c3; mkdir -p $W
machine_info $W
t0=$SECONDS
timeout 150 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 \
  --out $W/check-kernels-cudnn.json > $W/check-kernels-cudnn.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $W/check-kernels-cudnn.log | tail -1 | cut -c1-200)"
for run in a b; do
  bench_run $run 80 --precisions bf16 --layouts ndhwc --conv-engine cudnn
done
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $W/train.toml
smi=$(poll_memory $W/smi-train.txt 0)
timeout 80 /tmp/medddpm train --experiment $W/train.toml --run-dir $W/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? whole-GPU peak $(peak_mib $W/smi-train.txt) MiB ($SECONDS s)"; kill $smi
python3 - $W/run/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
cp $W/run/metrics.jsonl $out/train-metrics.jsonl
mkdir -p $W/masks && cp "$(ls /tmp/phantoms128/mask/* | head -1)" $W/masks/
smi=$(poll_memory $W/smi-sample.txt 0)
t0=$SECONDS
timeout 90 /tmp/medddpm sample --checkpoint $W/run --masks $W/masks --out $W/samples \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $W/sample.log 2>&1
echo "sample rc=$? wall $((SECONDS - t0)) s, whole-GPU peak $(peak_mib $W/smi-sample.txt) MiB"; kill $smi
tail -3 $W/sample.log | cut -c1-300
rm -rf $W/run/checkpoints $W/samples
pack_tune_cache $out; rm -f $out/compiled.txz
for run in a b; do cp $W/bench-$run/results.jsonl $out/results-$run.jsonl 2>/dev/null; done
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
