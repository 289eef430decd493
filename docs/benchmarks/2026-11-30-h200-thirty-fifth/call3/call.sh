#!/usr/bin/env bash
# Thirty-fifth session, call 3 (two H200s), the release build of f7aeaf2: check-kernels bf16
# with cuDNN and with our CubeCL convolutions (the merged dedup-d3: one custom-operation
# registration for cube's kernels and cuDNN's calls), the bf16 bench (no change expected), and
# the NCCL watch again after its abort was made not to wait on a call stuck inside NCCL: two
# "nodes" of one GPU each on NCCL's sockets, MEDDDPM_STEP_TIMEOUT=15, SIGSTOP and kill -9 of
# rank 1 once 9 steps are logged (timed with python this time: no bc on these machines).
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c3; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; cat .device-bin/binary-commit.txt; } > $w/machine.txt
cat $w/machine.txt
now() { python3 -c 'import time; print(f"{time.time():.2f}")'; }
since() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
for engine in cudnn cubecl; do
  t0=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout 150 /tmp/medddpm check-kernels --backend cuda --conv-engine $engine --precision bf16 --out $w/check-kernels-$engine.json > $w/check-kernels-$engine.log 2>&1
  echo "check-kernels $engine bf16 rc=$? ($((SECONDS - t0)) s): $(grep -vE '^\[tune\]' $w/check-kernels-$engine.log | tail -1 | cut -c1-200)"
done
CUDA_VISIBLE_DEVICES=0 timeout 70 /tmp/medddpm bench --backends cuda --layouts ndhwc --precisions bf16 --conv-engine cudnn \
  --warmup 3 --steps 10 --out $w/bench --timeout 65 > $w/bench.log 2>&1
echo "bench rc=$? ($SECONDS s)"; grep -E "median" $w/bench.log | cut -c1-200
ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep -E '^[0-9.]+$' | head -1)
[ -z "$ip" ] && ip=127.0.0.1
export MEDDDPM_RDZV_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
common="--backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn"
sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
    -e 's|^normalization = .*|normalization = "none"|' \
    -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
    -e "s|^steps = .*|steps = 400|" -e "s|^save_every = .*|save_every = 4|" \
    -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
    experiments/whole-head-128.toml > $w/long.toml
rank() {  # rank dir log
  CUDA_VISIBLE_DEVICES=$1 RANK=$1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$ip MASTER_PORT=29512 \
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo MEDDDPM_STEP_TIMEOUT=15 \
    /tmp/medddpm train --experiment $w/long.toml --run-dir $2 $common > $3 2>&1 &
}
failure() {  # name action
  local name=$1 dir=$w/run-$1
  rank 1 $dir $w/$name-r1.log; local q1=$!
  rank 0 $dir $w/$name-r0.log; local q0=$!
  local t=0
  while [ $t -lt 600 ]; do
    [ -f $dir/metrics.jsonl ] && [ $(wc -l < $dir/metrics.jsonl) -ge 9 ] && break
    sleep 0.1; t=$((t + 1))
  done
  local s=$(now)
  case $2 in kill1) kill -9 $q1 ;; stop1) kill -STOP $q1 ;; esac
  local ended=""
  for i in $(seq 1 900); do
    if ! kill -0 $q0 2>/dev/null; then ended=$(since $s); break; fi
    sleep 0.1
  done
  wait $q0 2>/dev/null; local rc0=$?
  echo "$name: rank 0 ended after ${ended:-(running at 90 s)} s (rc $rc0); steps logged $(wc -l < $dir/metrics.jsonl); checkpoints: $(ls $dir/checkpoints 2>/dev/null | tr '\n' ' ')"
  grep -vE "^\[tune\]" $w/$name-r0.log | tail -2 | cut -c1-330 | sed 's/^/  rank 0: /'
  kill -CONT $q1 2>/dev/null; kill -9 $q0 $q1 2>/dev/null; wait 2>/dev/null
  cp $dir/metrics.jsonl $w/metrics-$name.jsonl 2>/dev/null
  echo "  ($SECONDS s)"
}
failure stop1 stop1
failure kill1 kill1
rm -rf $w/run-*/checkpoints $w/bench/*.png
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c3
echo "total $SECONDS s"
