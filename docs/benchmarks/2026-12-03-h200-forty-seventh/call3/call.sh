#!/usr/bin/env bash
# Call 3 (one H200): the build whose CUDA sources define their vector types in a fixed order
# (vendored cubecl-cpp), exporting (MEDDDPM_EXPORT_KERNELS: nothing shipped is used, every
# kernel compiled and written out). Two bench bf16 runs (cuDNN) from two empty caches in two
# processes: the same kernels should give the same files. Then a short `train` and `sample` on
# the first cache (the kernels they add).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; cupti_library
W=/tmp/c3; rm -rf $W; mkdir -p $W
machine_info $W
first() {  # first NAME LIMIT
  local smi; smi=$(poll_memory "$W/smi-$1.txt" 0)
  timeout $2 /tmp/medddpm-new bench --backends cuda --warmup 1 --steps 3 --out $W/bench-$1 \
    --timeout $(($2 - 5)) --precisions bf16 --layouts ndhwc --conv-engine cudnn > $W/bench-$1.log 2>&1
  echo "bench $1 rc=$? peak $(peak_mib $W/smi-$1.txt) MiB ($SECONDS s)"; kill $smi
  grep -E "step median|kernels:|step took" $W/bench-$1.log | cut -c1-200
  rm -f $W/bench-$1/*.png
}
MEDDDPM_TUNE_CACHE=/tmp/fa MEDDDPM_EXPORT_KERNELS=/tmp/cubins-a first export-a 150
MEDDDPM_TUNE_CACHE=/tmp/fb MEDDDPM_EXPORT_KERNELS=/tmp/cubins-b first export-b 150
comm -3 <(ls /tmp/cubins-a) <(ls /tmp/cubins-b) > $W/differ.txt
echo "a $(ls /tmp/cubins-a | wc -l), b $(ls /tmp/cubins-b | wc -l), in one only $(wc -l < $W/differ.txt)"
for f in $(head -40 $W/differ.txt); do echo "$f $(strings /tmp/cubins-?/$f | grep -m1 '^\.text\.')"; done | sort -k2 > $W/differ-names.txt
cut -d' ' -f2 $W/differ-names.txt | sort | uniq -c | head
export MEDDDPM_TUNE_CACHE=/tmp/fa MEDDDPM_EXPORT_KERNELS=/tmp/cubins-a
train_toml 3 > $W/train.toml
timeout 150 /tmp/medddpm-new train --experiment $W/train.toml --run-dir $W/run \
  --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/train.log 2>&1
echo "train rc=$? ($SECONDS s)"; grep -E "kernels:" $W/train.log | head -1
mask=$(find /tmp/phantoms128 -name '*.nii*' | grep -i mask | head -1)
timeout 90 /tmp/medddpm-new sample --checkpoint $W/run --masks $mask --out $W/samples --sampler ddim \
  --steps 3 --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn --devices 0 > $W/sample.log 2>&1
echo "sample rc=$? ($SECONDS s)"; grep -E "kernels:" $W/sample.log | head -1
echo "exported $(ls /tmp/cubins-a | wc -l) CUBINs, $(du -sh /tmp/cubins-a | cut -f1)"
rm -rf $W/run $W/samples
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
tar czf $out/cubins.tgz -C /tmp cubins-a cubins-b
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
