# H100 x1 (eighteenth session, call 6). Binaries: portable tests (test-cuda) and medddpm (cuda, vulkan, host-profile), both
# from commit 3986e25 plus the review that split the kernels' accumulator dispatch into helpers (no change to what runs; the host-side launch helpers half_products and cube_count of commit a5a6c0e came after this build;
# defaults ldmatrix=1, rotate=1, narrow kernels, whole-wave split-K; no MEDDDPM_CONV_TUNING).
# The random-shape kernel tests on CUDA, check-kernels on CUDA bf16, then the whole-head 128^3 bench: our kernels on CUDA
# bf16, cuDNN bf16, and our kernels on Vulkan f16 where time remains.
set -u
unset MEDDDPM_CONV_TUNING
TESTS="default" bash scripts/gpu-conv-bench.sh $OUT/t
(cd $OUT/t && tar xzf tests.tgz -O | grep -E "test result|worst|panicked|FAILED" | head -12)
CHECK="cuda/bf16" TOTAL=440 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 cuda/cudnn/bf16/ndhwc:80 wgpu/cubecl/f16/ndhwc:170" --model whole-head --size 128 --warmup 1 --steps 3
