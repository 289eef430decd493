#!/usr/bin/env bash
# Thirty-fourth session, call 2 (one H200), binary 88ba421 (this session's, the gradient norm as
# one backend operation and the BraTS batch cap): check-kernels bf16 (cuDNN; the Adam rows now
# include the squared norm); `medddpm train` with the released whole-head settings, 40 steps,
# grad_norm on (default) and off, alternating twice (issue 40: the norm's cost); BraTS
# synthesize on one GPU with --batch-size auto (now 3) and 1 (issue 40's throughput figure).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c2; mkdir -p $w $out/logs
{ nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,driver_version --format=csv; git log -1 --format=%h; } > $w/machine.txt 2>&1
cat $w/machine.txt; cp $w/machine.txt $out/logs/
t0=$SECONDS
timeout 100 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision bf16 --out $w/check-kernels.json > $w/check-kernels.log 2>&1
echo "check-kernels cudnn bf16 rc=$? ($((SECONDS - t0)) s)"; grep -E "Adam update|squared" $w/check-kernels.log | cut -c1-330; grep -vE "^\[tune\]" $w/check-kernels.log | tail -2 | cut -c1-300
cp $w/check-kernels.log $w/check-kernels.json $out/logs/ 2>/dev/null
base() {
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
      -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml
}
base > $w/norm-on.toml
base | sed -e 's|^# grad_norm = false|grad_norm = false|' > $w/norm-off.toml
grep -n "grad_norm" $w/norm-off.toml
train() {
  local name=$1 run=$2
  local t0=$SECONDS
  timeout 120 /tmp/medddpm train --experiment $w/$name.toml --run-dir $w/run-$name-$run \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > $w/train-$name-$run.log 2>&1
  echo "train $name run $run rc=$? ($((SECONDS - t0)) s)"
  cp $w/run-$name-$run/metrics.jsonl $out/logs/train-$name-$run-metrics.jsonl 2>/dev/null; cp $w/train-$name-$run.log $out/logs/
  python3 - $w/run-$name-$run/metrics.jsonl <<'EOP'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
g = [x.get('grad_norm') for x in m]
print(f"  optimizer step: median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms over steps {m[5]['step']}-{m[-1]['step']}; last loss {m[-1]['loss']:.7f}; grad_norm first/last {g[0]} / {g[-1]}")
EOP
}
train norm-on 1; train norm-off 1; train norm-on 2; train norm-off 2
cp $w/norm-on.toml $w/norm-off.toml $out/logs/
echo "== ($SECONDS s)"
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
  if [ $SECONDS -gt $((440 - limit)) ]; then echo "synthesize $name skipped ($SECONDS s)"; return; fi
  local t0=$(date +%s.%N)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $w/smi-$name.txt & local mon=$!
  timeout $limit /tmp/medddpm synthesize --checkpoint $w/brats-run --masks $PWD/.device-data/brats/masks --out $w/$name \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --dataset-layout nnunet "$@" > $w/$name.log 2>&1
  echo "synthesize $name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s, peak $(sort -n $w/smi-$name.txt | tail -1) MiB"
  kill $mon
  grep -vE "pairs \(|^\[tune\]" $w/$name.log | head -6 | cut -c1-250; rate $w/$name
  cp $w/$name.log $w/smi-$name.txt $out/logs/; cp $w/$name/manifest.jsonl $out/logs/$name-manifest.jsonl 2>/dev/null
  cp $w/$name/synthesize.json $out/logs/$name-synthesize.json 2>/dev/null
  find $w/$name -name dataset.json -exec cp {} $out/logs/$name-dataset.json \;
}
synth brats-auto 110 --count 24 --devices 0
synth brats-b1 70 --count 12 --devices 0 --batch-size 1
tar czf $out/logs.tgz -C $out logs && rm -rf $out/logs
pack_tune_cache $out; rm -f $out/compiled.txz
echo "total $SECONDS s"; ls -la $out
