# H100 x1. Binary: cuda,vulkan,host-profile with the vector gathers (tensor-core forward/data-gradient kernel:
# 8-channel vector loads of channels-last input and weights, [m, k] staging, vector epilogue stores;
# tensor-core weight gradient: vector loads of both operands). First the random-shape kernel tests on
# CUDA (test-cuda build of the same source, .device-bin/portable_{conv,wgrad}-cuda.xz), then
# check-kernels on CUDA bf16, then the whole-head 128^3 bench cells.
mkdir -p $OUT/k; for t in portable_conv portable_wgrad; do xz -dc .device-bin/$t-cuda.xz > /tmp/$t && chmod +x /tmp/$t; (cd crates/medddpm-kernels && timeout 120 /tmp/$t --test-threads 1 --nocapture) > $OUT/k/$t-cuda.log 2>&1; echo "$t rc $? $(grep 'test result' $OUT/k/$t-cuda.log)"; done; tar czf $OUT/k.tgz -C $OUT k && rm -r $OUT/k
CHECK="cuda/bf16" TOTAL=${TOTAL:-500} bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 wgpu/cubecl/f16/ndhwc:170 cuda/cudnn/bf16/ndhwc:80" --model whole-head --size 128 --warmup 1 --steps 3
