# H100 x2 (nvidia-h100-x2: 2x H100 80GB HBM3, NVLink, 32 cores), 190 s. Same binary (symbols kept for the host profile).
TOTAL=555 bash scripts/gpu-scaling.sh $OUT/s "wh-bf16:whole-head:128:bf16:130:0,1 wh-prof:whole-head:128:bf16:110:0,1:--host-profile wh-tf32:whole-head:128:tf32:130:0,1 wh-bf16b:whole-head:128:bf16:130:0,1"
