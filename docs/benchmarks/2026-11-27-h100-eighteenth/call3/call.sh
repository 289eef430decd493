# H100 x1 (eighteenth session, call 3). Binaries: conv bench + portable tests (test-cuda) from the working tree after call 2
# plus the forward/data-gradient tensor-core kernel's products through ldmatrix and mma.sync 16x8x16 (ConvTuning ldmatrix,
# on by default on CUDA) instead of WMMA (whose bf16 loads compiled to generic loads, PRMT and MOVM: call 2's SASS profile).
# The random-shape kernel tests on CUDA under the defaults and with ldmatrix=0; the kernel benchmark with ldmatrix on/off;
# Nsight Compute's instruction mix for the forward kernel with ldmatrix.
set -u
TESTS="default ldmatrix=0" BENCH_SECONDS=200 bash scripts/gpu-conv-bench.sh $OUT/c3 --iters 3 --variant default= \
  --variant wmma=ldmatrix=0 --variant ldm-s2=stages=2 --variant ldm-k64=k_step=64
best=$(python3 scripts/pick-tuning.py $OUT/c3/conv.jsonl 2> $OUT/c3/pick.txt); cat $OUT/c3/pick.txt; echo "best: $best" | tee -a $OUT/c3/pick.txt
(cd $OUT/c3 && tar xzf tests.tgz -O | grep -E "^test .*(FAILED|ok)$|test result|worst|panicked" | head -40)
k=conv_gemm_mma
timeout 150 ncu --kernel-name regex:"$k" --launch-count 1 --set full -o $OUT/c3/$k \
  /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant d= > $OUT/c3/ncu-$k.log 2>&1
echo "ncu $k rc $? ($SECONDS s)"
ncu -i $OUT/c3/$k.ncu-rep --page details --print-details all > $OUT/c3/details-$k.txt 2>&1
ncu -i $OUT/c3/$k.ncu-rep --page source --print-source sass --csv > $OUT/c3/sass-$k.csv 2>&1
grep -E "Registers Per|Duration|L1/TEX Cache Thr|Issue Slots Busy|Executed Instructions  " $OUT/c3/details-$k.txt | head -12
xz -T2 $OUT/c3/*.txt $OUT/c3/*.csv $OUT/c3/*.log $OUT/c3/*.ncu-rep 2>/dev/null
tar cf $OUT/c3.tar -C $OUT c3 && rm -rf $OUT/c3
