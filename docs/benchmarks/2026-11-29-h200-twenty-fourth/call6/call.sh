#!/usr/bin/env bash
# `medddpm train` (released whole-head settings, 8 phantoms, 40 steps) twice with and twice
# without the data cache, then the engine call's parts (PARTS).
set -u
out=$1
source scripts/gpu-common.sh
unpack_binary; tune_cache
work=$(mktemp -d); mkdir -p "$work/logs"
run() { # name cache env...
  local name=$1 cache=$2; shift 2
  sed -e 's|^source = .*|source = { layout = "phantom", dir = "/tmp/phantoms128", count = 8, size = [128, 128, 128], seed = 0 }|' \
      -e 's|^normalization = .*|normalization = "none"|' \
      -e "s|^grid_policy = .*|grid_policy = \"resize\"\ncache = $cache|" \
      -e 's|^steps = .*|steps = 40|' -e 's|^samples_per_checkpoint = .*|samples_per_checkpoint = 0|' \
      experiments/whole-head-128.toml > "$work/$name.toml"
  env "$@" /tmp/medddpm train --experiment "$work/$name.toml" --run-dir "$work/run-$name" \
    --backend cuda --precision bf16 --layout ndhwc --conv-engine cudnn > "$work/logs/train-$name.log" 2>&1
  cp "$work/run-$name/metrics.jsonl" "$work/logs/metrics-$name.jsonl"
  python3 - "$work/logs/metrics-$name.jsonl" "$name" <<'EOF2'
import json, sys, statistics
m = [json.loads(l) for l in open(sys.argv[1])]
dt = [b['elapsed_s'] - a['elapsed_s'] for a, b in zip(m, m[1:])][4:]
print(f"{sys.argv[2]}: optimizer step median {1e3 * statistics.median(dt):.1f} ms, mean {1e3 * statistics.mean(dt):.1f} ms")
EOF2
}
for r in 1 2; do
  run cache-$r true X=1
  run nocache-$r false X=1
done
tar czf "$out/ab-logs.tgz" -C "$work" logs
bash scripts/gpu-engine-call.sh "$out" "${PARTS:-bench train sample check torch torch2}"
