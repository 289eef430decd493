#!/usr/bin/env bash
# Call 4 (one H200): the session's last code (.device-bin/binary-commit.txt: the plan search's
# knob loop a function of its own, an engine's notes and knob ranges optional) checked on the
# GPU: TF32 with an empty plan file (nothing seeded: every shape searched again, knobs
# included), check-kernels TF32, then bf16 (shipped plans) as a user runs it.
set -u
SECONDS=0
out=$1
source scripts/gpu-common.sh
unpack_binaries new; tune_cache; cupti_library
W=/tmp/c4; rm -rf $W; mkdir -p $W
machine_info $W
T=$MEDDDPM_TUNE_CACHE
echo '{}' > $T/cuda-tf32/cudnn-plans.json
BIN=/tmp/medddpm-new bench_run tf32-search 120 --precisions tf32 --layouts ndhwc --conv-engine cudnn
cp $T/cuda-tf32/cudnn-plans.json $W/cudnn-plans-tf32-searched.json
timeout 90 /tmp/medddpm-new check-kernels --backend cuda --conv-engine cudnn --precision tf32 \
  --out $W/check-kernels-tf32.json > $W/check-kernels-tf32.log 2>&1
echo "check-kernels cudnn tf32 rc=$? ($SECONDS s): $(grep -vE '^\[tune\]' $W/check-kernels-tf32.log | tail -1 | cut -c1-200)"
BIN=/tmp/medddpm-new bench_run bf16 70 --precisions bf16 --layouts ndhwc --conv-engine cudnn
python3 - $W <<'PY'
import json, sys
for run in ('tf32-search', 'bf16'):
    try: r = json.loads(open(f"{sys.argv[1]}/bench-{run}/results.jsonl").readline())
    except Exception as e: print(run, e); continue
    print(f"  {run}: first train step {r.get('first_train_step_s')} s, first sampling step {r.get('first_sample_step_s')} s")
p = json.load(open(f"{sys.argv[1]}/cudnn-plans-tf32-searched.json"))
print(f"  TF32 plans searched: {len(p)}, their times {sum(v['ms'] for v in p.values()):.2f} ms, as proposed {sum(v.get('proposed_ms') or v['ms'] for v in p.values()):.2f} ms")
PY
for f in $W/bench-*/results.jsonl; do d=$(dirname $f); cp $f $W/results-$(basename $d | sed 's/^bench-//').jsonl; done
tar czf $out/logs.tgz -C /tmp c4
echo "total $SECONDS s"
