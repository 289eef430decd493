#!/usr/bin/env bash
set -u
out=$OUT/oom; mkdir -p $out
export MEDDDPM_TUNE_CACHE=/tmp/tune; mkdir -p /tmp/tune; tar xzf .device-cache/tune-cache.tgz -C /tmp/tune
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $out/machine.txt
xz -t .device-bin/medddpm-oom.xz || exit 3; xz -dc .device-bin/medddpm-oom.xz > /tmp/mo && chmod +x /tmp/mo
cp scripts/.oom.toml $out/oom.toml
timeout 400 /tmp/mo train --experiment scripts/.oom.toml --run-dir /tmp/oomrun --backend cuda \
  --precision fp32 --tune-cache $MEDDDPM_TUNE_CACHE > $out/train.log 2>&1
echo "exit $?" >> $out/train.log
tail -c 3000 $out/train.log
tar czf $OUT/oom.tgz -C $OUT oom
