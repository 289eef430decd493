#!/usr/bin/env bash
# One GPU-machine call for the cuDNN engine: convolution agreement (check-kernels) per precision,
# then `medddpm bench` rows, all into OUTDIR (tar it up for the device tool's 8-file limit).
#
# Usage, from the repository root on the GPU machine, with the release binary carried as
# .device-bin/medddpm.xz and the tuning cache (and probe reference) in .device-cache/tune:
#   scripts/gpu-cudnn-bench.sh OUTDIR "PRECISIONS" "LAYOUTS" "ENGINES" [extra bench arguments...]
# e.g. scripts/gpu-cudnn-bench.sh out "tf32 bf16" "ndhwc" "cudnn cubecl" --steps 5
# CHECK_KERNELS=0 skips the agreement of the convolutions.
set -u
out=$1; precisions=$2; layouts=$3; engines=$4; shift 4
mkdir -p "$out"
xz -t .device-bin/medddpm.xz || { echo "carried binary is damaged"; exit 3; }
xz -dc .device-bin/medddpm.xz > /tmp/medddpm && chmod +x /tmp/medddpm
export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-.device-cache/tune}
mkdir -p "$MEDDDPM_TUNE_CACHE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv"
ldconfig -p | grep -i cudnn > "$out/cudnn-libs.txt"
if [ "${CHECK_KERNELS:-1}" = 1 ]; then
  for p in $precisions; do
    timeout 180 /tmp/medddpm check-kernels --backend cuda --conv-engine cudnn --precision "$p" \
      --scale 4 --out "$out/check-kernels-$p.json" 2>&1 | tee -a "$out/check-kernels.log"
  done
fi
for e in $engines; do  # one bench call per engine and layout; pass no --precisions in the extra arguments
  for l in $layouts; do
    timeout "${CELL_TIMEOUT:-900}" /tmp/medddpm bench --backends cuda --precisions "$(echo $precisions | tr ' ' ,)" \
      --layouts "$l" --conv-engine "$e" --out "$out/bench" --tune-cache "$MEDDDPM_TUNE_CACHE" "$@" 2>&1 \
      | tee -a "$out/bench.log"
  done
done
tar czf "$out/tune-cache.tgz" --exclude=probe-reference -C "$MEDDDPM_TUNE_CACHE" .
