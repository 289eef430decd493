# H100 x1 (eighteenth session, call 7). Binary: call 6's medddpm. Call 6's CUDA cubecl cell ran out of its 110 s while
# compiling the new kernels (first sampling step 43.7 s without a PTX cache); this call carries call 6's compiled kernels
# and tuning cache back in and runs that cell again with more time, then cuDNN bf16 on the same machine.
set -u
unset MEDDDPM_CONV_TUNING
TOTAL=270 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:200 cuda/cudnn/bf16/ndhwc:60" --model whole-head --size 128 --warmup 1 --steps 3
