#!/usr/bin/env bash
# Runs `medddpm bench` (the backend x precision x layout matrix) on a GPU machine.
#
# Usage, from the repository root on the GPU machine:
#   scripts/gpu-bench-matrix.sh BINARY OUTDIR [medddpm bench arguments...]
# Writes OUTDIR/results.{jsonl,csv,md,png}, OUTDIR/bench.log, OUTDIR/gpu.csv and, at the end,
# OUTDIR/tune-cache.tgz (the kernel-tuning cache, to carry into the next run).
# The tuning cache is $MEDDDPM_TUNE_CACHE (default .device-cache/tune); cubecl appends each tuned
# kernel to it as soon as it is tuned, so a run cut short still saves its tuning.
# For the wgpu backend the machine needs the Vulkan loader and glvnd: carry .gl/*.deb (libvulkan1,
# libglvnd0, libegl1, libgl1, libglx0, libopengl0, libgles2; see docs/benchmarks/README.md); they
# are unpacked here. With libvulkan1 alone the NVIDIA ICD did not load (no adapter).
# The device tool returns at most 8 files: tar OUTDIR up rather than pointing it at $OUT itself.
# BENCH_TIMEOUT (seconds, default 3000) bounds the whole matrix.
set -u
bin=$1; out=$2; shift 2
mkdir -p "$out"
if compgen -G ".gl/*.deb" > /dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
# The NVIDIA Vulkan ICD: the wgpu run of 2026-11-22 found no adapter with only the path below
# tried, so look in the usual places and say what was found.
if [ -z "${VK_DRIVER_FILES:-}" ]; then
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json $(find / -xdev -name 'nvidia_icd*.json' 2>/dev/null | head -3); do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; break; fi
  done
fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-<none found: wgpu will find no Vulkan adapter>}" | tee -a "$out/bench.log"
export MEDDDPM_TUNE_CACHE=${MEDDDPM_TUNE_CACHE:-.device-cache/tune}
mkdir -p "$MEDDDPM_TUNE_CACHE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.csv"
timeout "${BENCH_TIMEOUT:-3000}" "$bin" bench --out "$out" "$@" 2>&1 | tee -a "$out/bench.log"
rc=${PIPESTATUS[0]}
tar czf "$out/tune-cache.tgz" -C "$MEDDDPM_TUNE_CACHE" .
exit "$rc"
