# H100 x1: Nsight Compute on call 2's binary (vector gathers),
# cuda+cubecl bf16 ndhwc, whole-head 128^3: the tensor-core forward kernel (2 launches after the first
# convolution: 64->64 at 128^3) and the tensor-core weight gradient (first 2 launches), with the
# sections that say what bounds them. Text reports come back as ncu-*.txt.
. scripts/gpu-common.sh; unpack_binary; tune_cache
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section InstructionStats --section SchedulerStats"
for k in "fwd conv_gemm_mma 1" "wgrad wgrad_partial_mma 0"; do set -- $k
  timeout 240 ncu --target-processes all --kernel-name regex:$2 --launch-skip $3 --launch-count 2 $S --print-summary none \
    /tmp/medddpm bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cubecl --model whole-head \
    --size 128 --warmup 0 --steps 1 --timeout 220 --out /tmp/b-$1 > $OUT/ncu-$1.txt 2>&1
  echo "$1 rc $? $(grep -c 'Section: GPU Speed' $OUT/ncu-$1.txt) reports"
done
