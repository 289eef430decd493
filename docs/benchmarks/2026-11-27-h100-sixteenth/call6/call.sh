# H100 x1. Binary: the committed source of this session (cuda,vulkan,host-profile): call 4's kernels, the
# weight gradient's vector kernel with scalar dy loads where dy's channels do not allow vectors (the last
# convolution's single output channel), and tensor cores for products of 1 to 4 output channels too (the
# last convolution ran the FMA kernel, 7.8 ms of a forward pass in call 5); 256-unit cubes (call 5's
# 128-unit cubes reverted). Random-shape kernel tests on CUDA (test-cuda build of the same source),
# check-kernels on CUDA bf16 and Vulkan f16, the whole-head 128^3 bench cells with cuDNN as baseline, then
# Nsight Compute on the first three tensor-core weight-gradient launches.
mkdir -p $OUT/k; for t in portable_conv portable_wgrad; do xz -dc .device-bin/$t-cuda.xz > /tmp/$t && chmod +x /tmp/$t; (cd crates/medddpm-kernels && timeout 130 /tmp/$t --test-threads 1 --nocapture) > $OUT/k/$t-cuda.log 2>&1; echo "$t rc $? $(grep 'test result' $OUT/k/$t-cuda.log)"; done; tar czf $OUT/k.tgz -C $OUT k && rm -r $OUT/k
CHECK="cuda/bf16 wgpu/f16" TOTAL=${TOTAL:-380} bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 wgpu/cubecl/f16/ndhwc:170 cuda/cudnn/bf16/ndhwc:80" --model whole-head --size 128 --warmup 1 --steps 3

S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section InstructionStats"
timeout 150 ncu --target-processes all --kernel-name regex:wgrad_partial_mma --launch-count 3 $S --print-summary none \
  /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl --model whole-head \
  --size 128 --warmup 0 --steps 1 --timeout 140 --out /tmp/b-w > $OUT/ncu-wgrad.txt 2>&1
echo "ncu rc $? $(grep -c 'Section: GPU Speed' $OUT/ncu-wgrad.txt) reports"; xz -T0 $OUT/ncu-wgrad.txt
