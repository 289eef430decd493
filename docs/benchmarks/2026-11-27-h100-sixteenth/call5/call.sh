# H100 x1. Binary: call 4's source plus tensor-core cubes of 128 units (4 planes, 128 x bn blocks) for the
# forward/data-gradient kernel (call 4's test binaries already had this change and passed). Bench cells,
# then the GPU time of every convolution kernel launch of one bench run (ncu, gpu__time_duration, with grid
# sizes) to split the weight-gradient phase by layer.
TOTAL=330 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 wgpu/cubecl/f16/ndhwc:170" --model whole-head --size 128 --warmup 1 --steps 3
timeout 230 ncu --target-processes all --kernel-name regex:"wgrad|conv_gemm" --metrics gpu__time_duration.sum --csv \
  --log-file $OUT/ncu-times.csv /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl \
  --model whole-head --size 128 --warmup 0 --steps 1 --timeout 220 --out /tmp/b-n > $OUT/ncu-bench.log 2>&1
echo "ncu rc $? $(wc -l < $OUT/ncu-times.csv) lines"; xz -T0 $OUT/ncu-times.csv
