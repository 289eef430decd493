bash scripts/gpu-engine-call.sh $OUT "check bench tf32 train torch"   # binary: commit 10adbcd; carry .device-bin .device-peer .device-data
