# H100 x1 (eighteenth session, call 2). Binary: the conv bench from the working tree after call 1 plus a register cap for the
# weight gradient's vector kernel (ConvTuning wgrad_max_registers, written as launch bounds by the vendored cubecl-cuda).
# The kernel benchmark with the cap (128) alone and with 256-column tiles; then Nsight Compute's full set with per-instruction
# (SASS) counters for the forward tensor-core kernel and the weight gradient's vector kernel at 64 -> 64, 128^3.
set -u
BENCH_SECONDS=200 bash scripts/gpu-conv-bench.sh $OUT/c2 --iters 3 --variant default= \
  --variant wr128=wgrad_max_registers=128 --variant wr128tn16=wgrad_max_registers=128,wgrad_tn=16 \
  --variant tn16=wgrad_tn=16 --variant cubes16=wgrad_cubes=16
best=$(python3 scripts/pick-tuning.py $OUT/c2/conv.jsonl 2> $OUT/c2/pick.txt); cat $OUT/c2/pick.txt; echo "best: $best" | tee -a $OUT/c2/pick.txt
for k in conv_gemm_mma wgrad_partial_mma_vec; do
  timeout 150 ncu --kernel-name regex:"$k" --launch-count 1 --set full -o $OUT/c2/$k \
    /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant d= > $OUT/c2/ncu-$k.log 2>&1
  echo "ncu $k rc $? ($SECONDS s)"
  ncu -i $OUT/c2/$k.ncu-rep --page details --print-details all > $OUT/c2/details-$k.txt 2>&1
  ncu -i $OUT/c2/$k.ncu-rep --page source --print-source sass --csv > $OUT/c2/sass-$k.csv 2>&1
  grep -E "Registers Per|Duration|L1/TEX Cache Thr|Shared.*Bank|bank" $OUT/c2/details-$k.txt | head -12
  wc -c $OUT/c2/sass-$k.csv; head -c 600 $OUT/c2/sass-$k.csv; echo
done
xz -T2 $OUT/c2/*.txt $OUT/c2/*.csv $OUT/c2/*.log $OUT/c2/*.ncu-rep 2>/dev/null
tar cf $OUT/c2.tar -C $OUT c2 && rm -rf $OUT/c2
