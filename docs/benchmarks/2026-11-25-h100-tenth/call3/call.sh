set -u
out=$OUT/c3; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; [ -f /tmp/tune/.unpacked ] || { tar xzf .device-cache/tune-cache.tgz -C /tmp/tune; touch /tmp/tune/.unpacked; }
[ -x /tmp/m ] || { xz -dc .device-bin/medddpm-i14.xz > /tmp/m && chmod +x /tmp/m; }
{ nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv; ls /tmp/tune | head; du -sh /tmp/tune; } > $out/machine.txt
c="--backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn"
timeout 520 bash scripts/gpu-train-sample.sh /tmp/m .device-data/brats-100.toml .device-data/segs/BraTS2021_01306_seg.nii.gz $out/ts $c
s=$out/ts; ls $s > $out/files.txt; k=BraTS2021_01306
/tmp/m render .device-data/brats/t1/${k}_t1.nii.gz $s/${k}_seed-0_sample-0_{t1,t1ce,t2,flair}.nii.gz --mask .device-data/segs/${k}_seg.nii.gz --titles "real t1,sample t1,sample t1ce,sample t2,sample flair" --out $out/sample-01306.png > $out/render.log 2>&1
/tmp/m inspect $s/${k}_seed-0_sample-0_t1.nii.gz > $out/sample-header.txt 2>&1; /tmp/m inspect .device-data/segs/${k}_seg.nii.gz > $out/seg-header.txt 2>&1; rm -f $s/*.nii.gz $s/*.mem
grep -v "^\[tune\]" $s/train.log | tail -5; tail -3 $s/sample.log; cat $s/memory.json; tail -2 $s/metrics.jsonl
