# H100 x1. Binaries: the random-shape kernel tests on CUDA (portable_conv, portable_wgrad, --features test-cuda)
# from the final source (the stage loops merged, the new ConvTuning defaults), run under the defaults and with every
# other switch on too (two forward stages, 64-channel steps, 256-column weight-gradient tiles); then call 5's medddpm
# binary again on this machine, our kernels (bf16) and cuDNN, for a second whole-step ratio.
set -u
TESTS="default stages=2,k_step=64,wgrad_tn=16" bash scripts/gpu-conv-bench.sh $OUT/c6
TOTAL=300 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 cuda/cudnn/bf16/ndhwc:80" --model whole-head --size 128 --warmup 1 --steps 3
rm -f $OUT/p/compiled.txz $OUT/p/tune-cache.tgz
