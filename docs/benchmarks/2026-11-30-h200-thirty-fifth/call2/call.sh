#!/usr/bin/env bash
# Thirty-fifth session, call 2 (two H200s), this session's binary: issue 39's GPU runs.
# Whole-head 128^3 phantoms, the released settings (batch 1, grad_accum 2, bf16, cuDNN,
# channels-last), 12 optimizer steps:
#  one: one GPU (--devices 0): the one-GPU figure of this call;
#  A: one node, --devices 0,1 (a process per GPU, NCCL over NVLink);
#  B: two "nodes" of one GPU each, each rank started on its own with torchrun's variables,
#     NCCL forced onto its socket transport on lo (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1);
#  then B's set-up on a long run (checkpoint every 4 steps) with MEDDDPM_STEP_TIMEOUT=15:
#  SIGSTOP of rank 1 (its peer's all-reduce never finishes: the NCCL watch must abort it),
#  kill -9 of rank 1, SIGTERM to both: how long each rank took to end, its last lines, and what
#  the run folder kept; last, the bench's data-parallel scaling on 1 and 2 GPUs as time allows.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache; nccl_library
for d in /tmp/tune/cuda-*/autotune/0.10.0; do [ -d $d/device-0-0-cuda ] && [ ! -e $d/device-0-1-cuda ] && ln -s device-0-0-cuda $d/device-0-1-cuda; done
w=/tmp/c2; mkdir -p $w
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; git log -1 --format=%h; } > $w/machine.txt
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
make_toml 12 12 $w/train.toml
make_toml 400 4 $w/long.toml
report() {  # name
  python3 - "$w" "$1" <<'PY'
import json, sys
w, name = sys.argv[1:]
try:
    m = [json.loads(l) for l in open(f"{w}/metrics-{name}.jsonl")]
    t = sorted(b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m[2:], m[3:]))
    print(f"  {name}: {len(m)} steps, optimizer step (3..) median {t[len(t)//2]*1000:.1f} ms; losses {[round(x['loss'], 7) for x in m][:4]} .. {round(m[-1]['loss'], 7)}")
except Exception as e:
    print(f"  {name}: no metrics ({e})")
PY
}
plain() {  # name devices
  local s=$(date +%s.%N)
  timeout 100 /tmp/medddpm train --experiment $w/train.toml --run-dir $w/run-$1 $common --devices $2 > $w/train-$1.log 2>&1
  echo "$1 (--devices $2): rc=$? wall $(echo "$(date +%s.%N) - $s" | bc) s"
  cp $w/run-$1/metrics.jsonl $w/metrics-$1.jsonl 2>/dev/null; report $1
}
plain one 0
plain node 0,1
rank() {  # rank toml run-dir log [env...]
  local r=$1 toml=$2 dir=$3 log=$4; shift 4
  env CUDA_VISIBLE_DEVICES=$r RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$ip MASTER_PORT=29511 \
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo "$@" \
    /tmp/medddpm train --experiment $toml --run-dir $dir $common > $log 2>&1 &
}
s=$(date +%s.%N)
rank 1 $w/train.toml $w/run-nodes $w/train-nodes-r1.log; p1=$!
rank 0 $w/train.toml $w/run-nodes $w/train-nodes-r0.log; p0=$!
wait $p0; r0=$?; wait $p1; r1=$?
echo "B two nodes (sockets): rc rank0=$r0 rank1=$r1 wall $(echo "$(date +%s.%N) - $s" | bc) s"
cp $w/run-nodes/metrics.jsonl $w/metrics-nodes.jsonl 2>/dev/null; report nodes
python3 - $w <<'PY'
import json, sys
w = sys.argv[1]
l = {n: [json.loads(x)['loss'] for x in open(f"{w}/metrics-{n}.jsonl")] for n in ('one', 'node', 'nodes')}
print("  losses: node == nodes:", l['node'] == l['nodes'], "; one vs node max |diff|", max(abs(a - b) for a, b in zip(l['one'], l['node'])))
PY
echo "== ($SECONDS s)"
wait_steps() {  # run-dir steps tenths
  local t=0
  while [ $t -lt $3 ]; do
    [ -f $1/metrics.jsonl ] && [ $(wc -l < $1/metrics.jsonl) -ge $2 ] && return 0
    sleep 0.1; t=$((t + 1))
  done
  return 1
}
failure() {  # name action
  local name=$1 action=$2 dir=$w/run-$1
  rank 1 $w/long.toml $dir $w/$name-r1.log MEDDDPM_STEP_TIMEOUT=15; local q1=$!
  rank 0 $w/long.toml $dir $w/$name-r0.log MEDDDPM_STEP_TIMEOUT=15; local q0=$!
  wait_steps $dir 9 600 || echo "  $name: fewer than 9 steps in 60 s"
  local s=$(date +%s.%N)
  case $action in
    kill1) kill -9 $q1 ;;
    term) kill -TERM $q0 $q1 ;;
    stop1) kill -STOP $q1 ;;
  esac
  local t=0 ended0="" ended1=""
  while [ $t -lt 600 ]; do
    [ -z "$ended0" ] && ! kill -0 $q0 2>/dev/null && ended0=$(echo "$(date +%s.%N) - $s" | bc)
    [ -z "$ended1" ] && ! kill -0 $q1 2>/dev/null && ended1=$(echo "$(date +%s.%N) - $s" | bc)
    [ -n "$ended0" ] && { [ -n "$ended1" ] || [ $action = stop1 ]; } && break
    sleep 0.1; t=$((t + 1))
  done
  wait $q0 2>/dev/null; local rc0=$?
  echo "$name: rank 0 ended after ${ended0:-(running at 60 s)} s (rc $rc0), rank 1 after ${ended1:-(running)} s"
  echo "  steps logged $(wc -l < $dir/metrics.jsonl), checkpoints: $(ls $dir/checkpoints 2>/dev/null | tr '\n' ' ')"
  grep -vE "^\[tune\]" $w/$name-r0.log | tail -3 | cut -c1-400 | sed 's/^/  rank 0: /'
  grep -vE "^\[tune\]" $w/$name-r1.log | tail -2 | cut -c1-400 | sed 's/^/  rank 1: /'
  kill -CONT $q1 2>/dev/null; kill -9 $q0 $q1 2>/dev/null; wait 2>/dev/null
  cp $dir/metrics.jsonl $w/metrics-$name.jsonl 2>/dev/null
  echo "  ($SECONDS s)"
}
failure stop1 stop1
failure kill1 kill1
failure term term
rm -rf $w/run-*/checkpoints
if [ $SECONDS -lt 420 ]; then
  timeout $((570 - SECONDS)) /tmp/medddpm bench --devices 0,1 --backends cuda --precisions bf16 --layouts ndhwc \
    --conv-engine cudnn --warmup 3 --steps 10 --out $w/scaling > $w/scaling.log 2>&1
  echo "bench scaling rc=$? ($SECONDS s)"; grep -iE "scal|samples/s|efficien" $w/scaling.log | tail -4 | cut -c1-250
fi
pack_tune_cache $out; rm -f $out/compiled.txz
tar czf $out/logs.tgz -C /tmp c2
echo "total $SECONDS s"
