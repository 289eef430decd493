#!/usr/bin/env bash
# The real-MRI demo: fetch two real heads from the package registries (MNI152 2009 from PyPI's
# nilearn wheel, Colin27 from Debian's mricron-data), turn them into a labelled, augmented set
# (`medddpm prepare real-demo`: background / head / brain, 8 copies each at 24^3), train a small
# model on it (experiments/real-demo.toml), sample from one copy's mask and draw the sample
# beside the real image with the mask outlined. What it can and cannot show: docs/data.md.
#
#   scripts/real-demo.sh          # BACKEND=cuda|wgpu|cpu|auto (default auto), REAL_DATA=DIR
# Re-running continues (or reuses) the run and replaces only the samples and pictures.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${BACKEND:-auto}
data=${REAL_DATA:-datasets/real}
cargo build --release -p medddpm
bin=target/release/medddpm
start=$(date +%s)

if [ ! -s "$data/colin27/ch2.nii.gz" ] || [ ! -s "$data/mni152-2009/mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz" ]; then
  echo "== fetching MNI152 and Colin27 into $data"
  scripts/fetch-real-data.sh --dest "$data"
fi
if [ ! -f datasets/real-demo/prepare-report.json ]; then
  echo "== preparing the labelled set (datasets/real-demo)"
  "$bin" prepare real-demo --data "$data" --out datasets/real-demo --copies 8 --grid 24,24,24 --seed 0
fi

if [ -f runs/real-demo/checkpoints/latest ]; then
  echo "== continuing runs/real-demo"
  "$bin" train --resume runs/real-demo --backend "$backend"
else
  echo "== training on the real heads into runs/real-demo"
  "$bin" train --experiment real-demo --run-dir runs/real-demo --backend "$backend"
fi

out=runs/real-demo/samples-final
echo "== sampling from the masks of one copy of each head"
for case in colin27_0 mni152_0; do
  "$bin" sample --checkpoint runs/real-demo --masks "datasets/real-demo/mask/$case.nii.gz" \
    --samples-per-mask 2 --seed 1 --out "$out" --backend "$backend" --overwrite
  "$bin" render "datasets/real-demo/image/$case.nii.gz" "$out/${case}_seed-1_sample-0.nii.gz" \
    "$out/${case}_seed-1_sample-1.nii.gz" --mask "datasets/real-demo/mask/$case.nii.gz" \
    --titles "real ($case),sample 0,sample 1" --out "$out/$case-montage.png"
done

echo "== metrics against the real images"
"$bin" eval --masks datasets/real-demo/mask --real datasets/real-demo/image --synthetic "$out" \
  --out runs/real-demo/eval > /dev/null 2>&1 || true
# Per-label intensities of the samples and of the two real copies they were drawn for, then
# PSNR/SSIM/MAE inside the head.
if [ -f runs/real-demo/eval/eval.md ]; then
  sed -n '/^| image | kind/,/^$/p' runs/real-demo/eval/eval.md | grep -E '^\| image|^\|---|colin27_0|mni152_0 '
  sed -n '/^| mask | sample | real/,/^$/p' runs/real-demo/eval/eval.md
fi

echo
echo "Done in $(( $(date +%s) - start )) s."
echo "Pictures: $out/*-montage.png; samples (NIfTI, values in [-1, 1]): $out/"
