#!/usr/bin/env bash
# Thirty-eighth session, call 1 (one H200), the release build of the commit in
# .device-bin/binary-commit.txt (after issue 37's dedup-e1/e2 merges): check-kernels bf16 with
# cuDNN and with our CubeCL convolutions (the CubeCL run was cut off by its time limit in the
# thirty-sixth session's call 2, 29 cases checked), the bf16 bench twice (same figures within
# their spread as before the moves) and `medddpm train` (released whole-head settings, 12
# steps: the losses against earlier calls').
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c1; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
for engine in cudnn cubecl; do
  t0=$SECONDS
  timeout 280 /tmp/medddpm check-kernels --backend cuda --conv-engine $engine --precision bf16 --out $w/check-kernels-$engine.json > $w/check-kernels-$engine.log 2>&1
  echo "check-kernels $engine bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $w/check-kernels-$engine.log | tail -1 | cut -c1-200)"
done
bench() {  # name limit args...
  local name=$1 limit=$2; shift 2
  if [ $SECONDS -gt $((570 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt & local smi=$!
  timeout $limit /tmp/medddpm bench --backends cuda --layouts ndhwc --warmup 3 --steps 10 --out $w/bench-$name \
    --timeout $((limit - 5)) "$@" > $w/bench-$name.log 2>&1
  local rc=$?; kill $smi
  echo "bench $name rc=$rc whole-GPU peak $(sort -n $w/smi-$name.txt | tail -1) MiB ($SECONDS s)"
  grep -E "step median" $w/bench-$name.log | cut -c1-220
  grep -A2 "in use | reserved" $w/bench-$name.log | tail -1
}
bench bf16-a 70 --precisions bf16 --conv-engine cudnn
bench bf16-b 70 --precisions bf16 --conv-engine cudnn
if [ $SECONDS -lt 480 ]; then
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-train.txt & smi=$!
timeout 70 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn --devices 0 > $w/train.log 2>&1
echo "train rc=$? whole-GPU peak $(sort -n $w/smi-train.txt | tail -1) MiB ($SECONDS s)"; kill $smi
python3 - $w/run/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
else echo "train skipped ($SECONDS s)"; fi
rm -rf $w/run/checkpoints $w/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
