# H100 x1. After the review commit (one vector-width helper for both tensor-core launches, the
# weight gradient's vector kernel reusing row_offsets and holding its loads' constants like the
# scalar kernels' Loader, no change meant to what runs): the random-shape kernel tests on CUDA,
# built from that source with --features test-cuda.
mkdir -p $OUT/k; for t in portable_conv portable_wgrad; do xz -dc .device-bin/$t-cuda.xz > /tmp/$t && chmod +x /tmp/$t; (cd crates/medddpm-kernels && timeout 130 /tmp/$t --test-threads 1 --nocapture) > $OUT/k/$t-cuda.log 2>&1; echo "$t rc $? $(grep 'test result' $OUT/k/$t-cuda.log)"; done; tar czf $OUT/k.tgz -C $OUT k && rm -r $OUT/k
