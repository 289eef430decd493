#!/usr/bin/env bash
# Thirty-fourth session, call 1 (two H200s), binary 2d799e4 (the thirty-third session's):
# (issue 40) `medddpm synthesize` of a BraTS model (four modalities, 192x192x144, full size;
# weights from 3 training steps on the one shared BraTS case: the time does not depend on
# them), DPM-Solver++ 25 steps, bf16, cuDNN, channels-last, nnU-Net layout, one GPU then two;
# (issue 36) data-parallel scaling on 1 and 2 GPUs (bench --devices 0,1), the TF32 bench and
# our CubeCL convolutions' bf16 bench, each as time allows.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for p in "$MEDDDPM_TUNE_CACHE"/cuda-*; do
  a=$p/autotune/0.10.0; mkdir -p "$a/device-0-0-cuda"
  [ -e "$a/device-0-1-cuda" ] || ln -s device-0-0-cuda "$a/device-0-1-cuda"
done
w=/tmp/c1; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())'; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
# --- BraTS: a checkpoint, then synthesize ---
sed -e "s|^source = .*|source = { layout = \"brats\", root = \"$PWD/.device-data/brats/train\" }|" \
    -e 's|^steps = .*|steps = 3|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    -e 's|^save_every = .*|save_every = 3|' experiments/brats-192.toml > $w/brats.toml
t0=$SECONDS
timeout 150 /tmp/medddpm train --experiment $w/brats.toml --run-dir $w/brats-run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/brats-train.log 2>&1
echo "brats train rc=$? ($((SECONDS - t0)) s)"; tail -2 $w/brats-train.log | cut -c1-300; cp $w/brats-train.log $w/brats.toml $out/logs/
cp $w/brats-run/metrics.jsonl $out/logs/brats-train-metrics.jsonl 2>/dev/null
rate() { python3 - "$1" <<'EOP'
import json, sys, os, statistics
d = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(d, 'manifest.jsonl')) if l.strip()]
times = sorted(os.path.getmtime(os.path.join(d, l['files'][-1])) for l in lines)
secs = [l['seconds'] for l in lines]
n = len(times)
steady = (n - 1) / (times[-1] - times[0]) * 3600 if n > 2 and times[-1] > times[0] else float('nan')
print(f"  {n} pairs; steady {steady:.0f} volumes/hour (first to last file); per pair {statistics.median(secs):.3f} s median")
EOP
}
synth() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 250 > $w/smi-$name.txt & local mon=$!
  timeout 170 /tmp/medddpm synthesize --checkpoint $w/brats-run --masks $PWD/.device-data/brats/masks --out $w/$name \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --dataset-layout nnunet "$@" > $w/$name.log 2>&1
  echo "synthesize $name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  kill $mon
  echo "  peak $(awk -F', *' '$2+0 > p[$1]+0 { p[$1] = $2 } END { for (i in p) printf "gpu%s:%sMiB ", i, p[i] }' $w/smi-$name.txt)"
  tail -3 $w/$name.log | cut -c1-300; rate $w/$name
  cp $w/$name.log $w/smi-$name.txt $out/logs/; cp $w/$name/manifest.jsonl $out/logs/$name-manifest.jsonl 2>/dev/null
  cp $w/$name/synthesize.json $out/logs/$name-synthesize.json 2>/dev/null
  find $w/$name -name dataset.json -exec cp {} $out/logs/$name-dataset.json \;
  find $w/$name -name '*.nii.gz' | head -8 >> $out/logs/$name-files.txt
}
synth brats-one-gpu --count 24 --devices 0
synth brats-two-gpus --count 48 --devices 0,1
echo "== ($SECONDS s)"
# --- scaling, 1 and 2 GPUs ---
if [ $SECONDS -lt 330 ]; then
  TOTAL=$((560 - SECONDS)) bash scripts/gpu-scaling.sh $out/scaling "wh-bf16:whole-head:128:bf16:150:0,1" 2>&1 | grep -v "^cuBLAS"
  rm -f $out/scaling/tune-cache.tgz $out/scaling/compiled.txz
fi
echo "== ($SECONDS s)"
bench() {
  local name=$1 limit=$2; shift 2
  if [ $SECONDS -gt $((585 - limit)) ]; then echo "bench $name skipped ($SECONDS s)"; return; fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > $w/smi-bench-$name.txt & local smi=$!
  timeout $limit /tmp/medddpm bench --backends cuda --layouts ndhwc --warmup 3 --steps 10 --out $w/bench-$name \
    --timeout $((limit - 5)) "$@" > $w/bench-$name.log 2>&1
  echo "bench $name rc=$? whole-GPU peak $(sort -n $w/smi-bench-$name.txt | tail -1) MiB ($SECONDS s)"; kill $smi
  grep -E "median" $w/bench-$name.log | cut -c1-250
  find $w/bench-$name -name results.png -delete
  cp -r $w/bench-$name $w/bench-$name.log $w/smi-bench-$name.txt $out/logs/ 2>/dev/null
}
bench tf32 90 --precisions tf32 --conv-engine cudnn
bench cubecl 100 --precisions bf16 --conv-engine cubecl
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
pack_tune_cache $out
echo "total $SECONDS s"; ls -la $out
