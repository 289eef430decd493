# nvidia-h100-x4, same machine right after call 6, 72 s.
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
TOTAL=200 bash scripts/gpu-scaling.sh $OUT/s "wh-bf16b:whole-head:128:bf16:140:0,1,2,3"
