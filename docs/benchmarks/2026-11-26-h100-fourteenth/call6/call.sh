# nvidia-h100-x4 (4x H100 80GB HBM3, NVLink, 64 cores), 259 s.
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
TOTAL=545 bash scripts/gpu-scaling.sh $OUT/s "brats-bf16:brats:144,192,192:bf16:260:0,1,2,3 wh-bf16:whole-head:128:bf16:140:0,1,2,3 wh-tf32:whole-head:128:tf32:140:0,1,2,3"
