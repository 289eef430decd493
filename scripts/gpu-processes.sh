#!/usr/bin/env bash
# One GPU-machine check of data-parallel training with one process per device (issue 16):
# the quickstart experiment, accumulating two micro-batches per step, trained for STEPS steps
# on two GPUs with `--launch processes` (NCCL across the processes) and `--launch threads`
# (NCCL inside one process), and on one GPU; the losses of every step are compared.
#
# Usage, from the repository root on a two-GPU machine, with the release binary (cuda
# feature) carried as .device-bin/medddpm.xz:
#   scripts/gpu-processes.sh OUTDIR [PRECISION] [STEPS]
# Writes OUTDIR/processes.json (every run's losses, wall time and exit status, and the largest
# loss difference of each two-GPU run against the one-GPU run) and OUTDIR/processes-logs.tgz.
set -u
out=$1; precision=${2:-bf16}; steps=${3:-40}
mkdir -p "$out" && out=$(cd "$out" && pwd)
. scripts/gpu-common.sh
unpack_binary
tune_cache
nccl_library
/tmp/medddpm inspect quickstart > /tmp/q.toml
sed -i 's/^grad_accum = 1$/grad_accum = 2/; s/^samples_per_checkpoint = .*/samples_per_checkpoint = 0/' /tmp/q.toml
grep -q '^grad_accum = 2$' /tmp/q.toml || { echo "quickstart has no grad_accum = 1 line"; exit 3; }
mkdir -p /tmp/proc-logs
for run in one:0:threads threads:0,1:threads processes:0,1:processes; do
  IFS=: read -r name devices launch <<< "$run"
  rm -rf /tmp/proc-$name
  start=$(date +%s.%N)
  timeout 240 /tmp/medddpm train --experiment /tmp/q.toml --backend cuda --precision "$precision" \
    --devices "$devices" --launch "$launch" --steps "$steps" --run-dir /tmp/proc-$name \
    > /tmp/proc-logs/$name.log 2>&1
  rc=$?
  echo "$name rc $rc $(awk "BEGIN { print $(date +%s.%N) - $start }") s" | tee -a /tmp/proc-logs/status.txt
  tail -3 /tmp/proc-logs/$name.log
done
python3 - "$out/processes.json" <<'PY'
import json, sys
runs = {}
for line in open('/tmp/proc-logs/status.txt'):
    name, _, rc, wall, _ = line.split()
    try:
        losses = [json.loads(l)['loss'] for l in open(f'/tmp/proc-{name}/metrics.jsonl')]
    except OSError:
        losses = []
    runs[name] = {'rc': int(rc), 'wall_s': float(wall), 'losses': losses}
one = runs.get('one', {}).get('losses', [])
for name in ('threads', 'processes'):
    l = runs.get(name, {}).get('losses', [])
    if l and len(l) == len(one):
        runs[name]['max_abs_loss_diff_vs_one'] = max(abs(a - b) for a, b in zip(l, one))
        runs[name]['identical_to_threads'] = l == runs.get('threads', {}).get('losses')
json.dump(runs, open(sys.argv[1], 'w'), indent=1)
for k, v in runs.items():
    print(k, v['rc'], v['wall_s'], v.get('max_abs_loss_diff_vs_one'), v.get('identical_to_threads'))
PY
(cd /tmp/proc-logs && tar czf "$out/processes-logs.tgz" .)
