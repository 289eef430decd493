# nvidia-h100-x2 (GPU 0 only), 72 s: the kernels against their twins in f16 on CUDA (issue 18).
# Binary: CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release -p medddpm --features cuda,wgpu,host-profile at commit f795d7a (its code; the commit added only tests beyond what ran). Carry: .device-bin .device-data.
. scripts/gpu-common.sh; unpack_binary; tune_cache
for e in cubecl cudnn; do
  timeout 200 /tmp/medddpm check-kernels --backend cuda --conv-engine $e --precision f16 --scale 4 \
    --out $OUT/check-kernels-f16-$e.json > $OUT/check-kernels-f16-$e.log 2>&1
done
