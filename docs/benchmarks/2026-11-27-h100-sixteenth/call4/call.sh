# H100 x1. Binary: call 2's source plus the tensor-core weight gradient's vector kernel reworked: 64 K rows
# a step (four 16-deep products per barrier pair instead of one), the units of one K row sharing it (one
# position carried per unit for both operands). Same sequence as call 2: random-shape kernel tests on
# CUDA (test-cuda build: this source plus the 128-unit tensor-core cubes of call 5), check-kernels CUDA bf16,
# whole-head 128^3 bench cells.
mkdir -p $OUT/k; for t in portable_conv portable_wgrad; do xz -dc .device-bin/$t-cuda.xz > /tmp/$t && chmod +x /tmp/$t; (cd crates/medddpm-kernels && timeout 120 /tmp/$t --test-threads 1 --nocapture) > $OUT/k/$t-cuda.log 2>&1; echo "$t rc $? $(grep 'test result' $OUT/k/$t-cuda.log)"; done; tar czf $OUT/k.tgz -C $OUT k && rm -r $OUT/k
CHECK="cuda/bf16" TOTAL=${TOTAL:-500} bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 wgpu/cubecl/f16/ndhwc:170 cuda/cudnn/bf16/ndhwc:80" --model whole-head --size 128 --warmup 1 --steps 3
