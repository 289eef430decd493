# H100 x1. Binaries: the random-shape kernel tests on CUDA (portable_conv, portable_wgrad, --features test-cuda)
# from the final source (after the review commit: the forward kernel's stage index computed as step % stages, the
# plan test's expectation fixed), under the defaults and with two forward stages, 64-channel steps and 256-column
# weight-gradient tiles on top.
set -u
TESTS="default stages=2,k_step=64,wgrad_tn=16" bash scripts/gpu-conv-bench.sh $OUT/c8
