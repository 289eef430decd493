# nvidia-h100-x2, same machine, 77 s. NCCL_DEBUG's lines went to the bench children's captured stdout, so the log holds none.
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
TOTAL=570 bash scripts/gpu-scaling.sh $OUT/s "wh-dbg:whole-head:128:bf16:110:0,1:NCCL_DEBUG=INFO+NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,NET brats-bf16b:brats:144,192,192:bf16:280:0,1"
