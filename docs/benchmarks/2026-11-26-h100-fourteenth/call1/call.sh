# nvidia-h100-x2 (2x H100 80GB HBM3, NVLink, 32 cores), 451 s; carry .device-bin .device-data.
# Binary: built from commit 62943dd while the start's ready meeting (before NCCL initialisation) was being added to the tree; whether that build has it is not known. The replicas still checked the weights they received (reductions the lead never runs), which is what made the TF32 cell tune past its limit.
SECONDS=0
bash scripts/gpu-processes.sh $OUT bf16 40
T=$((575 - SECONDS)); echo "scaling budget $T s"
TOTAL=$T bash scripts/gpu-scaling.sh $OUT/s "wh-bf16:whole-head:128:bf16:110:0,1 wh-tf32:whole-head:128:tf32:110:0,1 wh-bf16-thr:whole-head:128:bf16:110:0,1:--launch+threads wh-bf16b:whole-head:128:bf16:110:0,1"
rm -f $OUT/s/profiles.tgz
echo "call total $SECONDS s"
