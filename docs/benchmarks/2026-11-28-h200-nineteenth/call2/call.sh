bash scripts/gpu-engine-call.sh $OUT "bench tf32 train torch2"   # binary: the cuDNN workspace fix, three reads ahead, train --gpu-trace; carry .device-bin .device-peer .device-data (call 1 cache)
