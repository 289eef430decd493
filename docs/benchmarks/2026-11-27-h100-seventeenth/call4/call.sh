# H100 x1. Binaries rebuilt after call 3: the register cap now written as __launch_bounds__(256, cubes) (NVCC had
# ignored --maxrregcount for cubecl's launch-bounded kernels: call 3 showed 163 registers under the cap). The kernel
# benchmark's settings, the fastest picked per kernel family, (the whole-head bench ran in call 5, with the picked setting made the default).
set -u
BENCH_SECONDS=200 bash scripts/gpu-conv-bench.sh $OUT/c4 --iters 3 --variant default= --variant ws2=wgrad_stages=2 \
  --variant r128=max_registers=128,wgrad_stages=2 --variant k64r128=k_step=64,max_registers=128,wgrad_stages=2,wgrad_tn=16 \
  --variant s2r128=stages=2,max_registers=128,wgrad_stages=2 --variant s2k64r128=stages=2,k_step=64,max_registers=128,wgrad_stages=2,wgrad_tn=16
best=$(python3 scripts/pick-tuning.py $OUT/c4/conv.jsonl 2> $OUT/c4/pick.txt); cat $OUT/c4/pick.txt; echo "best: $best" | tee -a $OUT/c4/pick.txt
timeout 60 ncu --kernel-name regex:"conv_gemm_mma" --launch-count 1 --section LaunchStats --section Occupancy --section SpeedOfLight \
  /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant r=max_registers=128 > $OUT/c4/ncu.txt 2>&1
grep -E "Registers Per|Block Limit (Reg|Shared)|Achieved Occ|Duration" $OUT/c4/ncu.txt
tar czf $OUT/c4.tgz -C $OUT c4 && rm -rf $OUT/c4
