# nvidia-h100-x4; binary: cargo build --release -p medddpm --features cuda at commit
# "Issue 16: a group of one converts ..." (the scaling bench of bcc2469, all device counts in
# one process); scripts/gpu-scaling.sh as of this call took DEVICES as its second argument.
bash scripts/gpu-scaling.sh $OUT/x4 0,1,2,3 "wh-bf16:whole-head:128:bf16:150 wh-tf32:whole-head:128:tf32:130 brats-bf16:brats:144,192,192:bf16:270"
