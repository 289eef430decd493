set -u
out=$OUT/c1; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i16.xz > /tmp/m && chmod +x /tmp/m; }
# cudarc asks for libnccl.so (not .so.2, the name PyTorch's nvidia-nccl-cu12 wheel ships)
nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)/lib
mkdir -p /tmp/nccl; ln -sf $nccl/libnccl.so.2 /tmp/nccl/libnccl.so; export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; ls -la $nccl; } > $out/machine.txt 2>&1
timeout 90 /tmp/m check-kernels --backend cuda --collective-devices 0 --out $out/collective.json > $out/collective.log 2>&1; echo "rc $?" >> $out/collective.log
tail -15 $out/collective.log
mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > $1 & echo $!; }
# Trainer throughput on one device (bf16, channels-last, cuDNN, 128^3 whole-head): alone, then
# as a group of one through NCCL (the multi-device path: flatten, all-reduce, unflatten).
for mode in alone nccl; do
  extra=""; [ $mode = nccl ] && extra="--collective nccl"
  p=$(mem $out/mem-$mode.txt)
  t=220; [ $mode = nccl ] && t=170
  timeout $t /tmp/m bench --devices 0 $extra --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn --model whole-head --size 128 --warmup 3 --steps 10 --out $out/scaling > $out/scaling-$mode.log 2>&1; echo "rc $?" >> $out/scaling-$mode.log
  kill $p; echo "$mode peak MiB: $(sort -n $out/mem-$mode.txt | tail -1)"; tail -4 $out/scaling-$mode.log
done
rm -f $out/mem-*.txt
