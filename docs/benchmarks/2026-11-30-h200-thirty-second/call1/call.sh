#!/usr/bin/env bash
# Thirty-second session, call 1 (two H200s): issue 39's runs started the way a cluster
# launcher starts them. Whole-head 128^3 phantoms, the released settings (batch 1, grad_accum 2,
# bf16, cuDNN, channels-last), 20 optimizer steps:
#  A: one node, `--devices 0,1` (a process per GPU, NCCL over NVLink/P2P);
#  B: two "nodes" of one GPU each, each `medddpm train` started on its own with torchrun's
#     variables (CUDA_VISIBLE_DEVICES one GPU each, LOCAL_RANK 0), the rendezvous at the host's
#     first non-loopback address, NCCL forced onto its network transport (NCCL_P2P_DISABLE=1
#     NCCL_SHM_DISABLE=1, sockets on lo);
#  then with B's set-up and a longer run: kill -9 of rank 1, SIGTERM to both ranks (as Slurm's
#  --signal or scancel), SIGSTOP of rank 1: how long each took to end, and what the run folder
#  kept.
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c1; mkdir -p $w
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > $w/machine.txt
cat $w/machine.txt
ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep -E '^[0-9.]+$' | head -1)
[ -z "$ip" ] && ip=127.0.0.1
echo "rendezvous host address: $ip" | tee $w/address.txt
export MEDDDPM_RDZV_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
common="--backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn"
make_toml() {  # steps save_every file
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = true|" \
      -e "s|^steps = .*|steps = $1|" -e "s|^save_every = .*|save_every = $2|" \
      -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml > $3
}
make_toml 20 20 $w/train.toml
make_toml 400 5 $w/long.toml
report() {  # name
  python3 - "$w" "$1" <<'PY'
import json, sys
w, name = sys.argv[1:]
try:
    m = [json.loads(l) for l in open(f"{w}/metrics-{name}.jsonl")]
    t = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:])]
    print(f"  {name}: {len(m)} steps, optimizer step (3..) median {sorted(t)[len(t)//2]*1000:.1f} ms")
    print("  losses", [round(x['loss'], 7) for x in m])
except Exception as e:
    print(f"  {name}: no metrics ({e})")
PY
}
# A: one node.
s=$(date +%s.%N)
timeout 150 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-one $common --devices 0,1 > $w/train-one.log 2>&1
echo "A one node --devices 0,1: rc=$? wall $(echo "$(date +%s.%N) - $s" | bc) s"
cp $w/run-one/metrics.jsonl $w/metrics-one.jsonl 2>/dev/null; report one
# B: two "nodes" (a rank per GPU, each started on its own).
rank() {  # rank toml run-dir log [extra env...]
  local r=$1 toml=$2 dir=$3 log=$4
  CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$ip MASTER_PORT=29511 \
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
    /tmp/medddpm train --experiment $toml --run-dir $dir $common > $log 2>&1 &
}
s=$(date +%s.%N)
rank 1 $w/train.toml $w/run-nodes $w/train-nodes-r1.log; p1=$!
rank 0 $w/train.toml $w/run-nodes $w/train-nodes-r0.log; p0=$!
wait $p0; r0=$?; wait $p1; r1=$?
echo "B two nodes: rc rank0=$r0 rank1=$r1 wall $(echo "$(date +%s.%N) - $s" | bc) s"
grep -hE "rank [01] of|NET/|Using network|via NET|Channel 00" $w/train-nodes-r*.log | sort | uniq | head -8 | cut -c1-200
cp $w/run-nodes/metrics.jsonl $w/metrics-nodes.jsonl 2>/dev/null; report nodes
python3 -c "
import json
a=[json.loads(l)['loss'] for l in open('$w/metrics-one.jsonl')]
b=[json.loads(l)['loss'] for l in open('$w/metrics-nodes.jsonl')]
print('  losses equal:', a==b, ' max |diff|', max(abs(x-y) for x,y in zip(a,b)) if a and b else None)" 2>&1
# Failures, each on a fresh long run (checkpoint every 5 steps).
wait_steps() {  # run-dir steps timeout
  local t=0
  while [ $t -lt $3 ]; do
    [ -f $1/metrics.jsonl ] && [ $(wc -l < $1/metrics.jsonl) -ge $2 ] && return 0
    sleep 0.5; t=$((t + 1))
  done
  return 1
}
failure() {  # name action
  local name=$1 action=$2 dir=$w/run-$1
  rank 1 $w/long.toml $dir $w/$name-r1.log; local q1=$!
  rank 0 $w/long.toml $dir $w/$name-r0.log; local q0=$!
  wait_steps $dir 12 160 || echo "  $name: fewer than 12 steps in 80 s"
  local s=$(date +%s.%N)
  case $action in
    kill1) kill -9 $q1 ;;
    term) kill -TERM $q0 $q1 ;;
    stop1) kill -STOP $q1 ;;
  esac
  local t=0 ended0="" ended1=""
  while [ $t -lt 90 ]; do
    [ -z "$ended0" ] && ! kill -0 $q0 2>/dev/null && ended0=$(echo "$(date +%s.%N) - $s" | bc)
    [ -z "$ended1" ] && ! kill -0 $q1 2>/dev/null && ended1=$(echo "$(date +%s.%N) - $s" | bc)
    [ -n "$ended0" ] && [ -n "$ended1" ] && break
    sleep 0.5; t=$((t + 1))
  done
  wait $q0 2>/dev/null; local rc0=$?
  echo "$name: rank 0 ended after ${ended0:-(still running at 45 s)} s (rc $rc0), rank 1 after ${ended1:-(still running at 45 s)} s"
  echo "  steps logged $(wc -l < $dir/metrics.jsonl), checkpoints: $(ls $dir/checkpoints 2>/dev/null | tr '\n' ' ')"
  tail -2 $w/$name-r0.log | cut -c1-300 | sed 's/^/  rank 0: /'
  tail -1 $w/$name-r1.log | cut -c1-300 | sed 's/^/  rank 1: /'
  kill -CONT $q1 2>/dev/null; kill -9 $q0 $q1 2>/dev/null; wait 2>/dev/null
}
failure kill1 kill1
failure term term
failure stop1 stop1
rm -rf $w/run-*/checkpoints
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c1
