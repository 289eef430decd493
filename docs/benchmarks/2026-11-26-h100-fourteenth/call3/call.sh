# nvidia-h100-x2, same machine right after call 2, 164 s.
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
TOTAL=570 bash scripts/gpu-scaling.sh $OUT/s "brats-bf16:brats:144,192,192:bf16:280:0,1 brats-bf16-thr:brats:144,192,192:bf16:280:0,1:--launch+threads"
