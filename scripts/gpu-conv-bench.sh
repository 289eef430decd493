#!/usr/bin/env bash
# One GPU-machine call of the kernel benchmark (crates/medddpm-kernels/benches/conv.rs) and,
# optionally, the random-shape kernel tests on CUDA under pipeline settings (ConvTuning).
#
# Usage, from the repository root on the GPU machine, with the binaries carried as
# .device-bin/conv-cuda.xz (cargo bench -p medddpm-kernels --features test-cuda --bench conv
# --no-run) and .device-bin/portable_{conv,wgrad}-cuda.xz (cargo test --release -p medddpm-cube
# --features test-cuda --test portable_conv --no-run, and portable_wgrad):
#   TESTS="SETTING ..." scripts/gpu-conv-bench.sh OUTDIR [bench arguments...]
# TESTS: settings for MEDDDPM_CONV_TUNING ("default" for none) under which both test binaries
# run first. Records OUTDIR/conv.jsonl, bench.log and tests.tgz.
set -u
SECONDS=0
out=$1; shift
mkdir -p "$out" /tmp/k && out=$(cd "$out" && pwd)
for b in conv-cuda portable_conv-cuda portable_wgrad-cuda; do
  [ -f ".device-bin/$b.xz" ] || continue
  xz -t ".device-bin/$b.xz" || { echo "$b.xz damaged"; exit 3; }
  xz -dc ".device-bin/$b.xz" > "/tmp/k/$b" && chmod +x "/tmp/k/$b"
done
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$out/machine.txt" 2>&1
for t in ${TESTS:-}; do
  setting=$t; [ "$t" = default ] && setting=
  for b in portable_conv portable_wgrad; do
    [ -x "/tmp/k/$b-cuda" ] || continue
    MEDDDPM_CONV_TUNING=$setting timeout 200 "/tmp/k/$b-cuda" --test-threads 1 --nocapture \
      > "$out/test-$b-$t.log" 2>&1
    echo "$b [$t] rc $? ($SECONDS s): $(grep -E '^test result' "$out/test-$b-$t.log")"
  done
done
if [ -x /tmp/k/conv-cuda ]; then
  timeout ${BENCH_SECONDS:-300} /tmp/k/conv-cuda --out "$out/conv.jsonl" "$@" > "$out/bench.log" 2>&1
  echo "bench rc $? ($SECONDS s)"; tail -60 "$out/bench.log"
fi
(cd "$out" && ls test-*.log 2>/dev/null | tar czf tests.tgz -T - && rm -f test-*.log)
echo "total ${SECONDS} s"
