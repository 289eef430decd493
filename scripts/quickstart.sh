#!/usr/bin/env bash
# The main job: build the medddpm command, train the quickstart model on the built-in phantoms,
# sample from it, draw the samples beside their mask and training image, and score them against
# it. About five minutes on 2 CPU cores once built (docs/benchmarks/quickstart.md). Re-running
# continues (or reuses) the existing run and replaces only the samples, pictures and metrics
# this script writes.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${BACKEND:-auto}
cargo build --release -p medddpm
bin=target/release/medddpm
start=$(date +%s)

if [ -f runs/quickstart/checkpoints/latest ]; then
  echo "== continuing runs/quickstart"
  "$bin" train --resume runs/quickstart --backend "$backend"
else
  echo "== training the quickstart model on phantoms (runs/phantoms) into runs/quickstart"
  "$bin" train --experiment quickstart --run-dir runs/quickstart --backend "$backend"
fi

out=runs/quickstart/samples-final
mask=runs/phantoms/mask/phantom_000.nii.gz
image=runs/phantoms/image/phantom_000.nii.gz
echo "== sampling with the EMA weights (the denoising of each sample as a GIF)"
"$bin" sample --checkpoint runs/quickstart --masks "$mask" --samples-per-mask 2 --seed 1 \
  --out "$out" --trajectory 25 --backend "$backend" --overwrite

echo "== pictures: the training image and both samples, mask outlined"
"$bin" render "$image" "$out/phantom_000_seed-1_sample-0.nii.gz" "$out/phantom_000_seed-1_sample-1.nii.gz" \
  --mask "$mask" --titles "training image,sample 0,sample 1" \
  --out "$out/montage.png" --gif "$out/sweep.gif"

echo "== metrics against the training image"
"$bin" eval --masks "$mask" --real runs/phantoms/image --synthetic "$out" \
  --out runs/quickstart/eval > /dev/null
# The per-label intensities of the samples and the image, then PSNR/SSIM/MAE in the head.
sed -n '/^| image | kind/,/^$/p' runs/quickstart/eval/eval.md
sed -n '/^| mask | sample | real/,/^$/p' runs/quickstart/eval/eval.md

echo
echo "Done in $(( $(date +%s) - start )) s."
echo "Loss curve: runs/quickstart/loss.png (per step: runs/quickstart/metrics.jsonl)"
echo "Samples (NIfTI on the mask's grid, values in [-1, 1]) and pictures: $out/"
echo "  montage.png (training image and samples), sweep.gif, *_trajectory.gif (denoising)"
echo "Metrics: runs/quickstart/eval/eval.md and eval.json"
