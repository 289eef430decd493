# H100 x1 (eighteenth session, call 1). Binaries: conv bench + portable tests (test-cuda) from the working tree after
# (a) the weight gradient's split rounded down to whole waves (wgrad_cubes=8: 75 slices of 14 tiles, not 76),
# (b) the narrow kernels for <= 4 output channels (forward and weight gradient, FMA units, vectors of channels),
# (c) the reduction's four loads in flight. Kernel tests on CUDA, then the kernel benchmark: defaults and wgrad_cubes 4/16.
set -u
TESTS="default" BENCH_SECONDS=220 bash scripts/gpu-conv-bench.sh $OUT/c1 --iters 3 --variant default= \
  --variant cubes4=wgrad_cubes=4 --variant cubes16=wgrad_cubes=16 --variant cubes6=wgrad_cubes=6
best=$(python3 scripts/pick-tuning.py $OUT/c1/conv.jsonl 2> $OUT/c1/pick.txt); cat $OUT/c1/pick.txt; echo "best: $best" | tee -a $OUT/c1/pick.txt
timeout 90 ncu --kernel-name regex:"wgrad_partial|conv_narrow" --launch-count 3 --section LaunchStats --section Occupancy --section SpeedOfLight \
  /tmp/k/conv-cuda --only "64->1 3^3" --iters 1 --no-cudnn --variant d= > $OUT/c1/ncu.txt 2>&1
grep -E "^  [a-z_]+|Registers Per|Block Limit (Reg|Shared)|Achieved Occ|Duration|Throughput" $OUT/c1/ncu.txt | head -40
xz -T2 $OUT/c1/ncu.txt
tar czf $OUT/c1.tgz -C $OUT c1 && rm -rf $OUT/c1
