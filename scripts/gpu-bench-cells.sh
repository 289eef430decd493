#!/usr/bin/env bash
# One GPU-machine call of `medddpm bench`, one cell at a time, each with its own time limit.
#
# Usage, from the repository root on the GPU machine, with the release binary carried as
# .device-bin/medddpm.xz and the tuning cache in .device-cache/tune:
#   scripts/gpu-bench-cells.sh OUTDIR "ENGINE/PRECISION/LAYOUT:SECONDS ..." [extra bench arguments...]
# e.g. scripts/gpu-bench-cells.sh out "cudnn/tf32/ndhwc:280 cubecl/tf32/ndhwc:200" --size 128 --steps 5
# Records go to OUTDIR/bench (results.jsonl gathers every cell); the updated tuning cache to
# OUTDIR/tune-cache.tgz (without the probe's float64 files, which are too large to bring back),
# and the CUDA driver's compiled-kernel cache (*/cuda-driver-jit) to OUTDIR/driver-jit.txz.
# CHECK_KERNELS="fp32 tf32 bf16" first checks the cuDNN convolutions in those precisions
# against the CPU (`medddpm check-kernels`, OUTDIR/check-kernels-P.json), 180 s each at most.
set -u
out=$1; cells=$2; shift 2
mkdir -p "$out" && out=$(cd "$out" && pwd)
xz -t .device-bin/medddpm.xz || { echo "carried binary is damaged"; exit 3; }
xz -dc .device-bin/medddpm.xz > /tmp/medddpm && chmod +x /tmp/medddpm
export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-.device-cache/tune}
mkdir -p "$MEDDDPM_TUNE_CACHE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv"
ldconfig -p | grep -i cudnn > "$out/cudnn-libs.txt"
for p in ${CHECK_KERNELS:-}; do
  timeout 180 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision "$p" \
    --scale 4 --out "$out/check-kernels-$p.json" 2>&1 | tee -a "$out/check-kernels.log"
done
for cell in $cells; do
  limit=${cell##*:}; IFS=/ read -r engine precision layout <<< "${cell%:*}"
  echo "== $engine / $precision / $layout (limit ${limit} s)" | tee -a "$out/bench.log"
  /tmp/medddpm bench --backends cuda --precisions "$precision" --layouts "$layout" \
    --conv-engine "$engine" --out "$out/bench" --tune-cache "$MEDDDPM_TUNE_CACHE" \
    --timeout "$limit" "$@" 2>&1 | tee -a "$out/bench.log"
done
tar czf "$out/tune-cache.tgz" --exclude=probe-reference --exclude=cuda-driver-jit \
  -C "$MEDDDPM_TUNE_CACHE" .
(cd "$MEDDDPM_TUNE_CACHE" && ls -d */cuda-driver-jit 2>/dev/null | XZ_OPT=-T0 tar cJf "$out/driver-jit.txz" -T -)
