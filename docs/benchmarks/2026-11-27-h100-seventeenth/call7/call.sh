# H100 x1. Call 4's kernel benchmark binary under Nsight Compute, the new defaults passed explicitly (that binary's
# built-in defaults are the old ones): the 64 -> 64 layer at 128^3, forward, data gradient and weight gradient
# (each once untimed, once timed), for where the capped kernels spend their cycles now.
set -u
mkdir -p /tmp/k $OUT/c7 && xz -t .device-bin/conv-cuda.xz && xz -dc .device-bin/conv-cuda.xz > /tmp/k/conv-cuda && chmod +x /tmp/k/conv-cuda
timeout 300 ncu --kernel-name regex:"conv_gemm_mma|wgrad_partial_mma" --launch-count 6 --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section InstructionStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
  /tmp/k/conv-cuda --only "64->64 3^3" --iters 1 --no-cudnn --variant new=max_registers=128,wgrad_stages=2 > $OUT/c7/ncu.txt 2>&1
echo "ncu rc $?"; grep -E "^\s+conv_gemm|^\s+wgrad|Registers Per|Achieved Occ|Duration|Issue Slots Busy|Eligible Warps|Executed Instructions  |issue_stalled|L1/TEX Hit|Warp Cycles Per Issued" $OUT/c7/ncu.txt | head -80
xz -T0 $OUT/c7/ncu.txt
