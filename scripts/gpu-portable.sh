#!/usr/bin/env bash
# One GPU-machine call of `medddpm bench` for issue 18: our portable CubeCL convolutions
# (--conv-engine cubecl) against cuDNN on CUDA, and on Vulkan through wgpu, one cell at a time.
#
# Usage, from the repository root on the GPU machine, with the release binary (cuda and wgpu
# features) carried as .device-bin/medddpm.xz and, for Vulkan, the loader packages as .gl/*.deb
# (the device README says how to fetch them):
#   scripts/gpu-portable.sh OUTDIR "BACKEND/ENGINE/PRECISION/LAYOUT:SECONDS ..." [bench arguments...]
# e.g. scripts/gpu-portable.sh $OUT/p "cuda/cudnn/bf16/ndhwc:90 wgpu/cubecl/f16/ndhwc:200" --steps 3
# A cell is skipped when fewer than SECONDS remain of TOTAL (default 560). CHECK="BACKEND/PRECISION
# ..." first checks our kernels against the CPU (`medddpm check-kernels --conv-engine cubecl`,
# CHECK_SECONDS each, default 80). Records: OUTDIR/results.jsonl and results.md; logs, check JSON and the report's
# csv and png OUTDIR/logs.tgz; the updated tuning results OUTDIR/tune-cache.tgz and compiled
# kernels OUTDIR/compiled.txz, as gpu-scaling.sh (eight files at most come back from a call).
set -u
SECONDS=0
out=$1; cells=$2; shift 2; total=${TOTAL:-560}
mkdir -p "$out" && out=$(cd "$out" && pwd)
. scripts/gpu-common.sh
unpack_binary
vulkan_loader
tune_cache
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  ldconfig -p | grep -i -E "cudnn|vulkan"; } > "$out/machine.txt" 2>&1
for c in ${CHECK:-}; do
  IFS=/ read -r backend precision <<< "$c"
  timeout ${CHECK_SECONDS:-80} /tmp/medddpm check-kernels --backend "$backend" --precision "$precision" \
    --conv-engine cubecl --scale 4 --out "$out/check-$backend-$precision.json" \
    > "$out/check-$backend-$precision.log" 2>&1
  echo "check $c rc $? ($SECONDS s): $(grep -i -E 'agree|fail|error|cases' "$out/check-$backend-$precision.log" | tail -3 | tr '\n' ' ')"
done
for cell in $cells; do
  limit=${cell##*:}; IFS=/ read -r backend engine precision layout <<< "${cell%:*}"
  name="$backend-$engine-$precision-$layout"
  if [ $SECONDS -gt $((total - limit)) ]; then echo "$name skipped (${SECONDS} s gone)"; continue; fi
  timeout $((limit + 15)) /tmp/medddpm bench --backends "$backend" --precisions "$precision" \
    --layouts "$layout" --conv-engine "$engine" --out /tmp/portable-bench --timeout "$limit" "$@" \
    > "$out/$name.log" 2>&1
  echo "rc $?" >> "$out/$name.log"
  echo "== $name ($SECONDS s)"; grep -E "^\| (cuda|wgpu)/|rror|^rc|note" "$out/$name.log" | head -12
done
cp /tmp/portable-bench/results.jsonl /tmp/portable-bench/results.md "$out/" 2>/dev/null
cp /tmp/portable-bench/results.{csv,png} "$out/" 2>/dev/null
(cd "$out" && ls *.log *.json results.csv results.png 2>/dev/null | tar czf logs.tgz -T - &&
  rm -f *.log *.json results.csv results.png)
pack_tune_cache "$out"
echo "total ${SECONDS} s"
