# H100 x1. Binaries: the random-shape kernel tests on CUDA (portable_conv, portable_wgrad, --features test-cuda)
# from the review of the change (the weight gradient's kernel chosen once, `PartialKernel`, and passed to the launch;
# ConvTuning's text form; the pipelining test split out), under the defaults and with the other switches on.
set -u
TESTS="default stages=2,k_step=64,wgrad_tn=16" bash scripts/gpu-conv-bench.sh $OUT/c9
