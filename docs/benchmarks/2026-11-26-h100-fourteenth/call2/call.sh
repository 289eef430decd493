# nvidia-h100-x2 (2x H100 80GB HBM3, NVLink, 32 cores), 134 s.
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
TOTAL=560 bash scripts/gpu-scaling.sh $OUT/s "wh-tf32:whole-head:128:tf32:150:0,1 wh-bf16:whole-head:128:bf16:110:0,1 wh-bf16-thr:whole-head:128:bf16:110:0,1:--launch+threads wh-bf16b:whole-head:128:bf16:110:0,1"
