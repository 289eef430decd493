# H100 x1 (eighteenth session, call 4). Binaries: conv bench + portable tests (test-cuda) from the working tree after call 3
# plus (a) the weight gradient's vector kernel on ldmatrix + mma.sync too (ConvTuning ldmatrix), (b) loads that are all inside
# the volume go straight to registers in both tensor-core kernels (the zero default's merge was call 3's PRMT share).
# The random-shape kernel tests on CUDA (defaults; ldmatrix=0), the kernel benchmark, the instruction mix of both kernels.
set -u
TESTS="default ldmatrix=0" BENCH_SECONDS=200 bash scripts/gpu-conv-bench.sh $OUT/c4 --iters 3 --variant default= \
  --variant wmma=ldmatrix=0 --variant wcubes16=wgrad_cubes=16 --variant wtn16=wgrad_tn=16
best=$(python3 scripts/pick-tuning.py $OUT/c4/conv.jsonl 2> $OUT/c4/pick.txt); cat $OUT/c4/pick.txt; echo "best: $best" | tee -a $OUT/c4/pick.txt
(cd $OUT/c4 && tar xzf tests.tgz -O | grep -E "^test .*(FAILED|ok)$|test result|worst|panicked" | head -40)
for k in conv_gemm_mma wgrad_partial_mma_vec; do
  timeout 100 ncu --kernel-name regex:"$k" --launch-count 1 --section SpeedOfLight --section InstructionStats --section SourceCounters \
    --section LaunchStats --section Occupancy -o $OUT/c4/$k /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant d= > $OUT/c4/ncu-$k.log 2>&1
  echo "ncu $k rc $? ($SECONDS s)"
  ncu -i $OUT/c4/$k.ncu-rep --page details --print-details all > $OUT/c4/details-$k.txt 2>&1
  ncu -i $OUT/c4/$k.ncu-rep --page source --print-source sass --csv > $OUT/c4/sass-$k.csv 2>&1
  grep -E "Registers Per|Duration|L1/TEX Cache Thr|Issue Slots Busy|Executed Instructions  " $OUT/c4/details-$k.txt | head -6
done
xz -T2 $OUT/c4/*.txt $OUT/c4/*.csv $OUT/c4/*.log $OUT/c4/*.ncu-rep 2>/dev/null
tar cf $OUT/c4.tar -C $OUT c4 && rm -rf $OUT/c4
