#!/usr/bin/env bash
# Packs the tuning results that the binary ships for compute capability 9.0 (H100, H200):
# crates/medddpm-backend/tuning/sm90-cuda-{bf16,tf32,fp32}.tar.gz from a tuning cache measured
# on such a GPU (default: the committed scripts/device-cache/tune-h100.tgz, unpacked).
# Only device 0's autotune logs and the cuDNN engine's choices; never compiled code.
# Usage: scripts/ship-tuning.sh [TUNE_CACHE_ROOT]
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-}
if [ -z "$root" ]; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  tar xzf scripts/device-cache/tune-h100.tgz -C "$root"
fi
out=crates/medddpm-backend/tuning
mkdir -p "$out"
for folder in cuda-bf16 cuda-tf32 cuda-fp32; do
  src="$root/$folder"
  [ -d "$src" ] || { echo "no $src" >&2; exit 1; }
  files=$(cd "$src" && { find autotune -path '*/device-0-0-cuda/*.json.log' -type f;
    ls cudnn-algorithms.json cudnn-plans.json 2>/dev/null || true; } | LC_ALL=C sort)
  # Reproducible: sorted names, no owners or times.
  (cd "$src" && tar --owner=0 --group=0 --numeric-owner --mtime=@0 --format=ustar -cf - $files) \
    | gzip -9n > "$out/sm90-$folder.tar.gz"
  echo "$out/sm90-$folder.tar.gz: $(echo "$files" | wc -l) files, $(stat -c %s "$out/sm90-$folder.tar.gz") bytes"
done
