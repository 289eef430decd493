#!/usr/bin/env bash
# The main job: train the quickstart model on the built-in phantoms, then sample from it.
# 10-15 minutes on 2 CPU cores. Re-running continues (or reuses) the existing run; nothing
# already in runs/ is overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${BACKEND:-auto}
cargo build --release -p medddpm
bin=target/release/medddpm

if [ -f runs/quickstart/checkpoints/latest ]; then
  echo "== continuing runs/quickstart"
  "$bin" train --resume runs/quickstart --backend "$backend"
else
  echo "== training the quickstart model on phantoms (runs/phantoms) into runs/quickstart"
  "$bin" train --experiment quickstart --run-dir runs/quickstart --backend "$backend"
fi

echo "== sampling with the EMA weights"
"$bin" sample --checkpoint runs/quickstart --masks runs/phantoms/mask/phantom_000.nii.gz \
  --samples-per-mask 2 --seed 1 --out runs/quickstart/samples-final --backend "$backend"

echo
echo "Done. Loss per step: runs/quickstart/metrics.jsonl"
echo "Synthetic volumes (NIfTI, on the mask's grid, values in [-1, 1]): runs/quickstart/samples-final/"
echo "Their mask: runs/phantoms/mask/phantom_000.nii.gz; the training image: runs/phantoms/image/phantom_000.nii.gz"
