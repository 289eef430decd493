bash scripts/gpu-engine-call.sh $OUT "bench train torch"   # binary: commit of the GPU trace and the loader (one read ahead); carry .device-bin .device-peer
