# H100 x1. Binaries: the kernel benchmark (benches/conv.rs, fixed: channels-last views) and medddpm (cuda, vulkan,
# host-profile) from the same source. The benchmark's six settings, the fastest picked per kernel family
# (scripts/pick-tuning.py), then the whole-head 128^3 bench: our kernels with that setting, and cuDNN.
set -u
BENCH_SECONDS=210 bash scripts/gpu-conv-bench.sh $OUT/c2 --iters 3 --variant default= --variant s2=stages=2,wgrad_stages=2 --variant k64=k_step=64,wgrad_tn=16 --variant s2k64=stages=2,k_step=64,wgrad_stages=2,wgrad_tn=16 --variant r128=max_registers=128 --variant s2r128=stages=2,max_registers=128
best=$(python3 scripts/pick-tuning.py $OUT/c2/conv.jsonl 2> $OUT/c2/pick.txt); cat $OUT/c2/pick.txt; echo "best: $best" | tee -a $OUT/c2/pick.txt
tar czf $OUT/c2.tgz -C $OUT c2 && rm -rf $OUT/c2
[ -n "$best" ] && MEDDDPM_CONV_TUNING=$best TOTAL=300 bash scripts/gpu-portable.sh $OUT/p "cuda/cubecl/bf16/ndhwc:110 cuda/cudnn/bf16/ndhwc:80" --model whole-head --size 128 --warmup 1 --steps 3
