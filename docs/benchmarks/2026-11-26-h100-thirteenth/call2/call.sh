# H100 x1, the same machine as call 1 (warm), 183 s, with call 1's tuning results and compiled kernels carried back in.
CHECK="wgpu/f16 wgpu/fp32" TOTAL=560 bash scripts/gpu-portable.sh $OUT/v "cuda/cudnn/bf16/ndhwc:80 wgpu/cubecl/fp32/ndhwc:180 wgpu/cubecl/f16/ndhwc:190" --model whole-head --size 128 --warmup 1 --steps 3
