# H100 x2, a fresh machine of the same kind, 93 s: one GPU alone, two one-GPU processes at once, two replicas in one process; two rounds.
bash scripts/gpu-scaling.sh $OUT/t "" > /dev/null 2>&1; bash scripts/gpu-two-processes.sh $OUT/t 2
