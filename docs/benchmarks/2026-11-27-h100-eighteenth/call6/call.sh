# H100 x1 (eighteenth session, call 6). Binary: medddpm (cuda, vulkan, host-profile) from the same source as call 5's
# (defaults: ldmatrix=1, rotate=1, the narrow kernels, whole-wave split-K; no MEDDDPM_CONV_TUNING). check-kernels on CUDA
# bf16, then the whole-head 128^3 bench: our kernels on CUDA bf16, cuDNN bf16, and our kernels on Vulkan f16 if time remains.
set -u
unset MEDDDPM_CONV_TUNING
CHECK="cuda/bf16" TOTAL=470 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 cuda/cudnn/bf16/ndhwc:80 wgpu/cubecl/f16/ndhwc:170" --model whole-head --size 128 --warmup 1 --steps 3
