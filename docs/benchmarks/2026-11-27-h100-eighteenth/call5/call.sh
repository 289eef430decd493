# H100 x1 (eighteenth session, call 5). Binaries: conv bench + portable tests (test-cuda) from the final kernel source:
# call 4's ldmatrix/mma.sync in both tensor-core kernels, without call 4's "all inside" load path (slower: call 4),
# plus the staged rows rotated over the units (ConvTuning rotate, on by default: the 2-way shared-store bank conflicts
# of call 2's profile) and the weight gradient's loads dealt to a K row's four units in turn.
# The random-shape kernel tests on CUDA (defaults), then the kernel benchmark with rotate on and off.
set -u
TESTS="default" BENCH_SECONDS=200 bash scripts/gpu-conv-bench.sh $OUT/c5 --iters 3 --variant default= --variant norotate=rotate=0
best=$(python3 scripts/pick-tuning.py $OUT/c5/conv.jsonl 2> $OUT/c5/pick.txt); cat $OUT/c5/pick.txt; echo "best: $best" | tee -a $OUT/c5/pick.txt
(cd $OUT/c5 && tar xzf tests.tgz -O | grep -E "^test .*(FAILED|ok)$|test result|worst|panicked" | head -30)
tar cf $OUT/c5.tar -C $OUT c5 && rm -rf $OUT/c5
