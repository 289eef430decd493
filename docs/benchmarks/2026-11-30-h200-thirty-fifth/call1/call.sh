#!/usr/bin/env bash
# Thirty-fifth session, call 1 (one H200), this session's binary: check-kernels bf16 with cuDNN
# (the new rows run the batch cases one example a call through the batch-chunk rewrites) and
# with our CubeCL convolutions (the GroupNorm kernels' shared affine operands and the weight
# gradient's shared K walk, merged from dedup-d2); the bf16 bench (issue 36's figures, against
# the thirty-third session's); BraTS synthesis at --batch-size 4 (the decoder's joined input past
# cuDNN's 2^31 values: now split into calls of two examples instead of burn's fallback) against
# auto (3).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c1; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; git log -1 --format=%h; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
ck() {  # engine limit
  local t0=$SECONDS
  timeout $2 /tmp/medddpm check-kernels --backend cuda --conv-engine $1 --precision bf16 --out $w/check-kernels-$1.json > $w/check-kernels-$1.log 2>&1
  echo "check-kernels $1 bf16 rc=$? ($((SECONDS - t0)) s)"
  grep -E "a call\)" $w/check-kernels-$1.log | cut -c1-200
  grep -E "FAIL|fail" $w/check-kernels-$1.log | head -5 | cut -c1-250
  grep -vE "^\[tune\]" $w/check-kernels-$1.log | tail -2 | cut -c1-300
  cp $w/check-kernels-$1.log $w/check-kernels-$1.json $out/logs/ 2>/dev/null
}
ck cudnn 110
ck cubecl 150
bench() {  # name limit args...
  local name=$1 limit=$2; shift 2
  if [ $SECONDS -gt $((560 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$name.txt & local smi=$!
  timeout $limit /tmp/medddpm bench --backends cuda --layouts ndhwc --warmup 3 --steps 10 --out $w/bench-$name \
    --timeout $((limit - 5)) "$@" > $w/bench-$name.log 2>&1
  echo "bench $name rc=$? whole-GPU peak $(sort -n $w/smi-bench-$name.txt | tail -1) MiB ($SECONDS s)"; kill $smi
  grep -E "median" $w/bench-$name.log | cut -c1-250
  find $w/bench-$name -name results.png -delete
  cp -r $w/bench-$name $w/bench-$name.log $w/smi-bench-$name.txt $out/logs/ 2>/dev/null
}
bench bf16 70 --precisions bf16 --conv-engine cudnn
echo "== ($SECONDS s)"
sed -e "s|^source = .*|source = { layout = \"brats\", root = \"$PWD/.device-data/brats/train\" }|" \
    -e 's|^steps = .*|steps = 3|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    -e 's|^save_every = .*|save_every = 3|' experiments/brats-192.toml > $w/brats.toml
t0=$SECONDS
timeout 100 /tmp/medddpm train --experiment $w/brats.toml --run-dir $w/brats-run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/brats-train.log 2>&1
echo "brats train rc=$? ($((SECONDS - t0)) s)"; cp $w/brats-train.log $out/logs/
rate() { python3 - "$1" "$2" <<'EOP'
import json, sys, os, statistics
d, b = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(os.path.join(d, 'manifest.jsonl')) if l.strip()]
times = sorted(os.path.getmtime(os.path.join(d, l['files'][-1])) for l in lines)
secs = [l['seconds'] for l in lines]
n = len(times)
# After the first batch's files: the pairs of the later batches over the time they took.
steady = (n - b) / (times[-1] - times[b - 1]) * 3600 if n > b and times[-1] > times[b - 1] else float('nan')
print(f"  {n} pairs; steady {steady:.0f} volumes/hour (after the first batch of {b}); per pair {statistics.median(secs) if secs else float('nan'):.3f} s median")
EOP
}
synth() {  # name limit batch args...
  local name=$1 limit=$2 batch=$3; shift 3
  if [ $SECONDS -gt $((585 - limit)) ]; then echo "synthesize $name skipped ($SECONDS s)"; return; fi
  local t0=$(date +%s.%N)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $w/smi-$name.txt & local mon=$!
  timeout $limit /tmp/medddpm synthesize --checkpoint $w/brats-run --masks $PWD/.device-data/brats/masks --out $w/$name \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --dataset-layout nnunet "$@" > $w/$name.log 2>&1
  echo "synthesize $name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s, peak $(sort -n $w/smi-$name.txt | tail -1) MiB"
  kill $mon
  grep -vE "pairs \(|^\[tune\]" $w/$name.log | head -6 | cut -c1-250; rate $w/$name $batch
  cp $w/$name.log $w/smi-$name.txt $out/logs/; cp $w/$name/manifest.jsonl $out/logs/$name-manifest.jsonl 2>/dev/null
}
synth brats-b4 110 4 --count 16 --devices 0 --batch-size 4
synth brats-auto 100 3 --count 15 --devices 0
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
pack_tune_cache $out; rm -f $out/compiled.txz
echo "total $SECONDS s"; ls -la $out
