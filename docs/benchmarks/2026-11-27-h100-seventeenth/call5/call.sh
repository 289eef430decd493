# H100 x1. Binary: medddpm (cuda, vulkan, host-profile) from the final source before the last refactor (the two kernels' stage loops merged into one loop each, no change to what runs): ConvTuning's defaults set to call 4's
# fastest (max_registers=128, wgrad_stages=2; no MEDDDPM_CONV_TUNING in the environment). check-kernels on CUDA bf16,
# then the whole-head 128^3 bench: our kernels on CUDA bf16 and on Vulkan f16, and cuDNN bf16.
set -u
unset MEDDDPM_CONV_TUNING
CHECK="cuda/bf16" TOTAL=520 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 cuda/cudnn/bf16/ndhwc:80 wgpu/cubecl/f16/ndhwc:170" --model whole-head --size 128 --warmup 1 --steps 3
