# nvidia-h100-x4, a fresh machine; the binary of call 2; .device-data carried call 2's
# tune-cache.tgz and compiled.txz (tuning results and cubecl's PTX).
TOTAL=330 bash scripts/gpu-scaling.sh $OUT/d "brats-bf16:brats:144,192,192:bf16:290:0,1,2,3 wh-bf16-p:whole-head:128:bf16:40:0,1 wh-bf16-f:whole-head:128:bf16:40:0,1:MEDDDPM_ALL_REDUCE_FLAT=1"
