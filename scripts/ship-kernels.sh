#!/usr/bin/env bash
# Packs the machine code the binary ships for compute capability 9.0 (H100, H200):
# crates/medddpm-backend/tuning/sm90-cuda-kernels.tar.gz from the folders that runs on such a GPU
# filled with MEDDDPM_EXPORT_KERNELS (their *.cubin files, one per kernel, named by the hash of
# the architecture option and the CUDA source; the same name in two folders is the same code).
# Run those with an empty tuning cache (a kernel found in the PTX cache is not compiled, so not
# written), on the build that will ship the archive's kernels or one whose kernels are the same.
# Usage: scripts/ship-kernels.sh DIR...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 DIR..." >&2; exit 2; }
here=$(pwd)
cd "$(dirname "$0")/.."
out=$PWD/crates/medddpm-backend/tuning/sm90-cuda-kernels.tar.gz
all=$(mktemp -d)
trap 'rm -rf "$all"' EXIT
for dir in "$@"; do
  case $dir in /*) ;; *) dir=$here/$dir ;; esac
  find "$dir" -maxdepth 1 -name '*.cubin' -exec cp -n {} "$all/" \;
done
n=$(ls "$all" | wc -l)
[ "$n" -gt 0 ] || { echo "no *.cubin in $*" >&2; exit 1; }
for f in "$all"/*.cubin; do
  [[ $(basename "$f") =~ ^[0-9a-f]{32}\.cubin$ ]] || { echo "unexpected name $f" >&2; exit 1; }
  [ "$(head -c4 "$f" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || { echo "$f is not a CUBIN" >&2; exit 1; }
done
# Reproducible: sorted names, no owners or times.
(cd "$all" && ls | LC_ALL=C sort | tar --owner=0 --group=0 --numeric-owner --mtime=@0 \
  --format=ustar -cf - -T -) | gzip -9n > "$out"
echo "$out: $n kernels, $(stat -c %s "$out") bytes"
