set -u
SECONDS=0
out=$OUT/c2; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i16.xz > /tmp/m && chmod +x /tmp/m; }
# cudarc asks for libnccl.so (not .so.2, the name PyTorch's nvidia-nccl-cu12 wheel ships)
nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
mkdir -p /tmp/nccl; ln -sf $nccl/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $out/machine.txt 2>&1
mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $1 & echo $!; }
# Trainer throughput on one H100 at 128^3 (whole-head, cuDNN): bf16 channels-last alone and as
# a group of one through NCCL (the multi-device path: flatten, all-reduce, unflatten), then tf32.
run() { # name timeout args...
  name=$1; t=$2; shift 2
  if [ $SECONDS -gt $((560 - t)) ]; then echo "$name skipped (time)"; return; fi
  p=$(mem $out/mem-$name.txt)
  timeout $t /tmp/m bench --devices 0 --backends cuda --conv-engine cudnn --model whole-head --size 128 --warmup 3 --steps 10 --out $out/scaling "$@" > $out/scaling-$name.log 2>&1; echo "rc $?" >> $out/scaling-$name.log
  kill $p; echo "$name peak MiB: $(sort -n $out/mem-$name.txt | tail -1)"; grep -E "gradients|device\(s\)|^rc" $out/scaling-$name.log
}
run bf16-alone 200 --precisions bf16 --layouts ndhwc
run bf16-nccl 100 --precisions bf16 --layouts ndhwc --collective nccl
run bf16-alone2 90 --precisions bf16 --layouts ndhwc
run tf32-alone 180 --precisions tf32 --layouts ndhwc
run tf32-nccl 90 --precisions tf32 --layouts ndhwc --collective nccl
rm -f $out/mem-*.txt
echo "total ${SECONDS}s"
