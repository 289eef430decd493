# H100 x1. Binaries: the random-shape kernel tests on CUDA (portable_conv, portable_wgrad, --features test-cuda) and the
# first build of the kernel benchmark (benches/conv.rs), from the source with ConvTuning (two stages, 64-channel steps,
# the register cap, the weight gradient's two stages and 256-column tiles). The tests ran under the defaults and with
# every switch on. The benchmark's numbers are void: it passed a channels-last *buffer* ([b, d, h, w, c] shape) where
# the engines take its permuted [b, c, d, h, w] view, so burn's fallback convolved the wrong shapes (fixed for call 2).
TESTS="default stages=2,k_step=64,max_registers=128,wgrad_stages=2,wgrad_tn=16" BENCH_SECONDS=280 bash scripts/gpu-conv-bench.sh $OUT/c1 --iters 5 --variant default= --variant s2=stages=2,wgrad_stages=2 --variant k64=k_step=64,wgrad_tn=16 --variant s2k64=stages=2,k_step=64,wgrad_stages=2,wgrad_tn=16 --variant r128=max_registers=128 --variant s2r128=stages=2,max_registers=128 --variant s2k64r128=stages=2,k_step=64,max_registers=128
timeout 90 ncu --kernel-name regex:"conv_gemm_mma|wgrad_partial_mma" --metrics launch__registers_per_thread,launch__occupancy_limit_registers,gpu__time_duration.sum --csv /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant d= --variant r=max_registers=128 --variant s=stages=2,k_step=64,wgrad_stages=2,wgrad_tn=16 > $OUT/c1/ncu.csv 2>&1
