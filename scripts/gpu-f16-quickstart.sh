#!/usr/bin/env bash
# f16 training end to end on a GPU: the quickstart (experiments/quickstart.toml, 1300 steps on
# the built-in phantoms) trained with --precision f16 and its dynamic loss scaling, on Vulkan
# with our portable convolutions and on CUDA with cuDNN, each then sampled and scored against
# the training image as scripts/quickstart.sh does.
# Usage, from the repository root on the GPU machine, with the release binary (cuda and wgpu
# features) carried as .device-bin/medddpm.xz and the Vulkan loader packages as .gl/*.deb:
#   scripts/gpu-f16-quickstart.sh OUTDIR ["wgpu:cubecl cuda:cudnn"]
set -u
out=$1; runs=${2:-"wgpu:cubecl cuda:cudnn"}
mkdir -p "$out" && out=$(cd "$out" && pwd)
. scripts/gpu-common.sh
unpack_binary
vulkan_loader
tune_cache
mask=runs/phantoms/mask/phantom_000.nii.gz
image=runs/phantoms/image/phantom_000.nii.gz
for r in $runs; do
  IFS=: read -r backend engine <<< "$r"
  run=/tmp/f16-$backend; flags=(--backend "$backend" --precision f16 --conv-engine "$engine")
  SECONDS=0
  timeout 400 /tmp/medddpm train --experiment quickstart --run-dir "$run" "${flags[@]}" \
    > "$out/train-$backend.log" 2>&1
  echo "train $backend rc $? (${SECONDS} s)"
  grep -i -E "overflow|scale|error" "$out/train-$backend.log" | head -5
  cp "$run/metrics.jsonl" "$out/metrics-$backend.jsonl" 2>/dev/null
  timeout 120 /tmp/medddpm sample --checkpoint "$run" --masks "$mask" --samples-per-mask 2 \
    --seed 1 --out "$run/samples" "${flags[@]}" --overwrite > "$out/sample-$backend.log" 2>&1
  echo "sample $backend rc $?"
  timeout 60 /tmp/medddpm eval --masks "$mask" --real runs/phantoms/image --synthetic "$run/samples" \
    --out "$run/eval" > /dev/null 2>&1
  cp "$run/eval/eval.md" "$out/eval-$backend.md" 2>/dev/null
  sed -n '/^| image | kind/,/^$/p' "$run/eval/eval.md"
done
(cd "$out" && tar czf f16-logs.tgz *.log *.jsonl *.md 2>/dev/null && rm -f *.log *.jsonl *.md)
