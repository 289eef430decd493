#!/usr/bin/env bash
# One GPU-machine call of `medddpm bench --devices`: data-parallel training throughput on the
# first 1, 2, .., N GPUs of the host (issues 16 and 17).
#
# Usage, from the repository root on the GPU machine, with the release binary (cuda feature)
# carried as .device-bin/medddpm.xz:
#   scripts/gpu-scaling.sh OUTDIR "NAME:MODEL:SIZE:PRECISION:SECONDS:DEVICES[:EXTRA] ..."
# e.g. scripts/gpu-scaling.sh $OUT/x4 "wh-bf16:whole-head:128:bf16:150:0,1,2,3 brats-bf16:brats:144,192,192:bf16:300:0,1,2,3"
# Each cell is one `bench --devices DEVICES` process (cuDNN, channels-last, one volume per
# device and micro-batch, 3 untimed then 10 timed optimizer steps per device count), killed
# after SECONDS; a cell is skipped when fewer than SECONDS remain of TOTAL (default 560).
# EXTRA is more bench arguments, '+' for a space (e.g. --host-profile, --collective+nccl);
# a NAME=VALUE word in it is set in the bench's environment instead.
# CHECK_COLLECTIVE=DEVICES first checks the all-reduce over those devices against known
# answers (`medddpm check-kernels --collective-devices`, OUTDIR/collective.json).
# Records: OUTDIR/scaling.jsonl; logs (NAME.log, collective.log and .json) OUTDIR/logs.tgz; per-GPU peak memory of each cell
# (nvidia-smi every 250 ms; a bench process keeps the memory of its earlier device counts, so
# read a GPU's figure for the device counts that used it) OUTDIR/peaks.txt; host profiles
# OUTDIR/profiles.tgz; the updated tuning results OUTDIR/tune-cache.tgz, and the compiled
# kernels (cubecl's PTX and the driver's cache) OUTDIR/compiled.txz.
#
# Every GPU of one host is the same model, so the tuning results of device 0 serve them all:
# each device's cubecl autotune folder (device-0-I-cuda) is made a link to device 0's, so a
# device that joins at the next device count finds device 0's results instead of tuning again.
set -u
SECONDS=0
out=$1; cells=$2; total=${TOTAL:-560}
mkdir -p "$out" && out=$(cd "$out" && pwd)
. scripts/gpu-common.sh
unpack_binary
tune_cache
nccl_library
for p in "$MEDDDPM_TUNE_CACHE"/cuda-bf16 "$MEDDDPM_TUNE_CACHE"/cuda-tf32; do
  a=$p/autotune/0.10.0; mkdir -p "$a/device-0-0-cuda"
  for i in 1 2 3 4 5 6 7; do
    [ "$i" = 0 ] || [ -e "$a/device-0-$i-cuda" ] || ln -s device-0-0-cuda "$a/device-0-$i-cuda"
  done
done
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  lscpu
  nvidia-smi topo -m; ls -la "$NCCL_DIR"; } > "$out/machine.txt" 2>&1
if [ -n "${CHECK_COLLECTIVE:-}" ]; then
  timeout 120 /tmp/medddpm check-kernels --backend cuda --collective-devices "$CHECK_COLLECTIVE" \
    --out "$out/collective.json" > "$out/collective.log" 2>&1
  echo "collective check rc $? ($SECONDS s): $(tail -2 "$out/collective.log" | tr '\n' ' ')"
fi
for cell in $cells; do
  IFS=: read -r name model size precision limit devices extra <<< "$cell"
  if [ $SECONDS -gt $((total - limit)) ]; then echo "$name skipped (${SECONDS} s gone)"; continue; fi
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 250 \
    > "$out/$name-mem.txt" & mon=$!
  envs=(); args=()
  for word in ${extra//+/ }; do
    if [[ $word =~ ^[A-Z_]+= ]]; then envs+=("$word"); else args+=("$word"); fi
  done
  timeout "$limit" env "${envs[@]}" /tmp/medddpm bench --devices "$devices" --backends cuda \
    --precisions "$precision" --layouts ndhwc --conv-engine cudnn --model "$model" \
    --size "$size" --warmup 3 --steps 10 --out /tmp/scaling-$name "${args[@]}" \
    > "$out/$name.log" 2>&1
  echo "rc $?" >> "$out/$name.log"
  kill $mon
  peak=$(awk -F', *' '$2+0 > p[$1]+0 { p[$1] = $2 } END { for (i in p) printf "gpu%s:%sMiB ", i, p[i] }' "$out/$name-mem.txt")
  echo "$name $peak" >> "$out/peaks.txt"
  rm -f "$out/$name-mem.txt"
  cat /tmp/scaling-$name/scaling.jsonl >> "$out/scaling.jsonl" 2>/dev/null
  echo "$name ($SECONDS s): $(grep -E 'device\(s\)|^rc|rror' "$out/$name.log" | tr '\n' ' ') peak $peak"
done
(cd "$out" && ls *.log collective.json 2>/dev/null | tar czf logs.tgz -T - && rm -f *.log collective.json)
(cd /tmp && ls scaling-*/host-profile-*.folded 2>/dev/null | tar czf "$out/profiles.tgz" -T -)
pack_tune_cache "$out"
echo "total ${SECONDS} s"
