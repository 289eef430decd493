#!/usr/bin/env bash
# Thirty-sixth session, call 1 (one H200): a measurement build (1734d8d + the uncommitted
# pool-trim patch, read from the environment) sweeping how much freed memory cubecl's pools may
# keep before a large request hands it back to the driver's stream-ordered pool
# (MEDDDPM_MEASURE_POOL_SLACK_MIB), and whether that pool keeps freed memory across
# synchronisations (MEDDDPM_MEASURE_POOL_KEEP=1): the bf16 bench's whole-GPU peak and step
# times for each, then `medddpm train` (released whole-head settings) with and without.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c1; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
bench() {  # name env...
  local name=$1; shift
  if [ $SECONDS -gt 440 ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-$name.txt & local smi=$!
  env "$@" timeout 70 /tmp/medddpm bench --backends cuda --layouts ndhwc --precisions bf16 --conv-engine cudnn \
    --warmup 3 --steps 10 --out $w/bench-$name --timeout 65 > $w/bench-$name.log 2>&1
  local rc=$?; kill $smi
  echo "bench $name ($*) rc=$rc whole-GPU peak $(sort -n $w/smi-$name.txt | tail -1) MiB ($SECONDS s)"
  grep -iE "median|peak|back to back" $w/bench-$name.log | cut -c1-220
}
bench base
bench s1024k MEDDDPM_MEASURE_POOL_SLACK_MIB=1024 MEDDDPM_MEASURE_POOL_KEEP=1
bench s256k MEDDDPM_MEASURE_POOL_SLACK_MIB=256 MEDDDPM_MEASURE_POOL_KEEP=1
bench s0k MEDDDPM_MEASURE_POOL_SLACK_MIB=0 MEDDDPM_MEASURE_POOL_KEEP=1
bench s256 MEDDDPM_MEASURE_POOL_SLACK_MIB=256
bench base2
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 12|" -e "s|^save_every = .*|save_every = 12|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/train.toml
train() {  # name env...
  local name=$1; shift
  if [ $SECONDS -gt 520 ]; then echo "train $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-train-$name.txt & local smi=$!
  env "$@" timeout 60 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$name --backend cuda --precision bf16 \
    --layout ndhwc --conv-engine cudnn --devices 0 > $w/train-$name.log 2>&1
  local rc=$?; kill $smi
  echo "train $name ($*) rc=$rc whole-GPU peak $(sort -n $w/smi-train-$name.txt | tail -1) MiB ($SECONDS s)"
  python3 - $w/run-$name/metrics.jsonl <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
print(f"  {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m]}")
PY
  rm -rf $w/run-$name/checkpoints
}
train base
train s256k MEDDDPM_MEASURE_POOL_SLACK_MIB=256 MEDDDPM_MEASURE_POOL_KEEP=1
rm -rf $w/bench-*/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c1
echo "total $SECONDS s"
