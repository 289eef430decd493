#!/usr/bin/env bash
# Thirty-fourth session, call 3 (one H200), binary 28ca630: BraTS synthesize with each batch's
# files written while the next batch samples, each file of a pair on its own thread (against
# call 2's 899 volumes an hour, files written in turn after each batch), --batch-size auto (3).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; nproc; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
sed -e "s|^source = .*|source = { layout = \"brats\", root = \"$PWD/.device-data/brats/train\" }|" \
    -e 's|^steps = .*|steps = 3|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    -e 's|^save_every = .*|save_every = 3|' experiments/brats-192.toml > $w/brats.toml
t0=$SECONDS
timeout 100 /tmp/medddpm train --experiment $w/brats.toml --run-dir $w/brats-run --backend cuda --precision bf16 \
  --layout ndhwc --conv-engine cudnn > $w/brats-train.log 2>&1
echo "brats train rc=$? ($((SECONDS - t0)) s)"; cp $w/brats-train.log $out/logs/
rate() { python3 - "$1" <<'EOP'
import json, sys, os, statistics
d = sys.argv[1]
lines = [json.loads(l) for l in open(os.path.join(d, 'manifest.jsonl')) if l.strip()]
times = sorted(os.path.getmtime(os.path.join(d, l['files'][-1])) for l in lines)
secs = [l['seconds'] for l in lines]
n = len(times)
steady = (n - 1) / (times[-1] - times[0]) * 3600 if n > 2 and times[-1] > times[0] else float('nan')
print(f"  {n} pairs; steady {steady:.0f} volumes/hour (first to last file); per pair {statistics.median(secs) if secs else float('nan'):.3f} s median")
EOP
}
synth() {
  local name=$1 limit=$2; shift 2
  if [ $SECONDS -gt $((200 - limit)) ]; then echo "synthesize $name skipped ($SECONDS s)"; return; fi
  local t0=$(date +%s.%N)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $w/smi-$name.txt & local mon=$!
  timeout $limit /tmp/medddpm synthesize --checkpoint $w/brats-run --masks $PWD/.device-data/brats/masks --out $w/$name \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --dataset-layout nnunet "$@" > $w/$name.log 2>&1
  echo "synthesize $name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s, peak $(sort -n $w/smi-$name.txt | tail -1) MiB"
  kill $mon
  grep -vE "pairs \(|^\[tune\]" $w/$name.log | head -6 | cut -c1-250; rate $w/$name
  cp $w/$name.log $w/smi-$name.txt $out/logs/; cp $w/$name/manifest.jsonl $out/logs/$name-manifest.jsonl 2>/dev/null
}
synth brats-auto 110 --count 24 --devices 0
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
echo "total $SECONDS s"; ls -la $out
