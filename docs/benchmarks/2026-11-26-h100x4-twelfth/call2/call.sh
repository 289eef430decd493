# nvidia-h100-x4; binary: cargo build --release -p medddpm --features cuda,host-profile of the
# working tree that became commit "Issue 16/17: ..." (packed all-reduce, BraTS phantoms, one
# device alone, thread counters), before the bench ran each device count in its own process.
CHECK_COLLECTIVE=0,1,2,3 bash scripts/gpu-scaling.sh $OUT/c "wh-bf16:whole-head:128:bf16:150:0,1,2,3 brats-bf16:brats:144,192,192:bf16:290:0,1,2,3 wh-bf16-flat:whole-head:128:bf16:45:0,1:MEDDDPM_ALL_REDUCE_FLAT=1 wh-bf16-prof:whole-head:128:bf16:45:0,1:--host-profile wh-tf32:whole-head:128:tf32:100:0,1,2,3"
