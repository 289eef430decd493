set -u
out=$OUT/c2; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i14.xz > /tmp/m && chmod +x /tmp/m; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $out/machine.txt
c="--backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn"
timeout 330 bash scripts/gpu-train-sample.sh /tmp/m .device-data/brats-100.toml .device-data/segs $out/train-sample $c
s=$out/train-sample; ls $s > $out/files.txt
for id in 01306 00529; do k=BraTS2021_$id; /tmp/m render $s/${k}_seed-0_sample-0_{t1,t1ce,t2,flair}.nii.gz --mask .device-data/segs/${k}_seg.nii.gz --titles "t1,t1ce,t2,flair" --out $out/sample-$id.png >> $out/render.log 2>&1; done
/tmp/m inspect $s/BraTS2021_01306_seed-0_sample-0_t1.nii.gz > $out/sample-header.txt 2>&1; /tmp/m inspect .device-data/segs/BraTS2021_01306_seg.nii.gz > $out/seg-header.txt 2>&1; rm -f $s/*.nii.gz
b() { name=$1; lim=$2; shift 2; echo "== $name $(date +%T)" >> $out/bench.log
  timeout $((lim+15)) /tmp/m bench --backends cuda --precisions bf16 --layouts ndhwc --conv-engine cudnn \
   --out /tmp/$name --tune-cache $MEDDDPM_TUNE_CACHE --timeout $lim --steps 5 --warmup 2 --no-breakdown "$@" >> $out/bench.log 2>&1; cp /tmp/$name/results.jsonl $out/$name.jsonl; }
left=$((560 - SECONDS)); [ $left -gt 60 ] && b brats-blocks $left --model brats --size 144,192,192 --activation-checkpointing blocks
grep -E "step median|first .* took|==" $out/bench.log
for f in $out/*.jsonl; do python3 -c "
import json
for l in open('$f'):
  r=json.loads(l); print('$f'.split('/')[-1], {k:r.get(k) for k in ['train_step_median_ms','sample_step_median_ms','peak_memory_mib','status','first_train_step_s']})"; done
