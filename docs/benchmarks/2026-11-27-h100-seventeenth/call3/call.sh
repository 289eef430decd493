# H100 x1. Call 2's kernel benchmark binary under Nsight Compute: the 64 -> 64 layer at 128^3 (forward, data
# gradient, weight gradient; each timed once after one untimed call) under the defaults, the register cap, and the
# cap with 64-channel steps and the weight gradient's two stages: launch, occupancy, scheduler and warp-state sections.
set -u
mkdir -p /tmp/k $OUT/c3 && xz -t .device-bin/conv-cuda.xz && xz -dc .device-bin/conv-cuda.xz > /tmp/k/conv-cuda && chmod +x /tmp/k/conv-cuda
timeout 400 ncu --kernel-name regex:"conv_gemm_mma|wgrad_partial_mma" --launch-count 18 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
  /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant d= --variant r=max_registers=128 \
  --variant kr=k_step=64,max_registers=128,wgrad_stages=2 > $OUT/c3/ncu.txt 2>&1
echo "ncu rc $?"; grep -E "^\s+conv_gemm|^\s+wgrad|Registers Per|Block Limit (Reg|Shared)|Shared Memory Configuration|Achieved Occ|Duration|Issue Slots Busy|Eligible Warps" $OUT/c3/ncu.txt | head -150
xz -T0 $OUT/c3/ncu.txt
