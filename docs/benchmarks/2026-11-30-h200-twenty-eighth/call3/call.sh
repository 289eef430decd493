#!/usr/bin/env bash
# Twenty-eighth session, call 3: first steps on a fresh machine (no tuning results, no compiled
# kernels, no driver cache: an empty cache folder and HOME), where the CUDA driver keeps its
# machine code, and our portable CubeCL convolutions in bf16 (the committed tuning results).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
w=/tmp/c3; mkdir -p $w
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv; env | grep -E '^CUDA|^NV' ; echo "HOME=$HOME"; ls -la $HOME/.nv 2>&1; } > $w/machine.txt 2>&1
cat $w/machine.txt
mkdir -p /tmp/fresh-home
HOME=/tmp/fresh-home MEDDDPM_TUNE_CACHE=/tmp/fresh timeout 200 /tmp/medddpm bench --backends cuda --precisions bf16 \
  --layouts ndhwc --conv-engine cudnn --warmup 1 --steps 3 --out $w/fresh --timeout 190 > $w/bench-fresh.log 2>&1
echo "fresh bench rc=$?"; grep -E "first|median|tuned|cuDNN" $w/bench-fresh.log | cut -c1-400
echo "fresh caches:"; (cd /tmp/fresh && du -sh */* 2>&1 | head -20); du -sh /tmp/fresh-home/.nv 2>&1
HOME=/tmp/fresh-home MEDDDPM_TUNE_CACHE=/tmp/fresh timeout 100 /tmp/medddpm bench --backends cuda --precisions bf16 \
  --layouts ndhwc --conv-engine cudnn --warmup 1 --steps 3 --out $w/fresh-again --timeout 90 > $w/bench-fresh-again.log 2>&1
echo "fresh again rc=$?"; grep -E "first" $w/bench-fresh-again.log | cut -c1-400
timeout 240 /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl \
  --warmup 3 --steps 10 --out $w/cubecl --timeout 230 > $w/bench-cubecl.log 2>&1
echo "cubecl bench rc=$?"; grep -E "median|first .* took|GPU per" $w/bench-cubecl.log | cut -c1-330
echo "tune caches:"; (cd /tmp/tune && du -sh */* 2>&1 | head -20); du -sh $HOME/.nv 2>&1
find $w -name results.png -delete
tar czf $out/logs.tgz -C /tmp c3
pack_tune_cache $out
