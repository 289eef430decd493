#!/usr/bin/env python3
"""The fastest pipeline setting in a kernel-benchmark record (benches/conv.rs --out), as a
MEDDDPM_CONV_TUNING value: the forward/data-gradient switches (stages, k_step,
max_registers, ldmatrix, rotate) with the least forward plus data-gradient time summed over the shapes, and
the weight-gradient switches (wgrad_stages, wgrad_tn, wgrad_cubes, wgrad_max_registers) with
the least weight-gradient time.
Usage: pick-tuning.py conv.jsonl"""
import json
import sys
from collections import defaultdict

FORWARD = ("stages", "k_step", "max_registers", "ldmatrix", "rotate")
WGRAD = ("wgrad_stages", "wgrad_tn", "wgrad_cubes", "wgrad_max_registers")

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
fwd, wgrad = defaultdict(lambda: defaultdict(list)), defaultdict(lambda: defaultdict(list))
for r in rows:
    if not r["tuning"]:
        continue
    # Keys added after a record was made read as their defaults then.
    t = {"wgrad_cubes": "8", "wgrad_max_registers": "0", "ldmatrix": "0", "rotate": "0"}
    t.update(kv.split("=") for kv in r["tuning"].split(","))
    fwd[tuple(t[k] for k in FORWARD)][r["shape"]].append(r["forward_ms"] + r["data_grad_ms"])
    wgrad[tuple(t[k] for k in WGRAD)][r["shape"]].append(r["weight_grad_ms"])


def best(table):
    totals = {k: sum(min(v) for v in shapes.values()) for k, shapes in table.items()}
    n = max(len(s) for s in table.values())
    full = {k: v for k, v in totals.items() if len(table[k]) == n}
    return min(full, key=full.get), full


f, ft = best(fwd)
w, wt = best(wgrad)
for name, keys, table in (("forward+data grad", FORWARD, ft), ("weight grad", WGRAD, wt)):
    for k, v in sorted(table.items(), key=lambda kv: kv[1]):
        print(f"# {name}: {dict(zip(keys, k))}: {v:.2f} ms", file=sys.stderr)
print(",".join(f"{k}={v}" for k, v in list(zip(FORWARD, f)) + list(zip(WGRAD, w))))
