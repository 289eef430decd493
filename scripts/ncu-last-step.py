#!/usr/bin/env python3
"""Kernels of the last training step in an `ncu --csv --metrics gpu__time_duration.sum` log of
`medddpm train`: the launches after the last `adam_update` kernel of the step before it (each
step ends with its Adam launches: one per parameter tensor before 2026-11-24's multi-tensor
kernel, about one per 32 tensors since), summed by kernel name, largest first.

Usage: scripts/ncu-last-step.py NCU.csv [TOP]
"""
import csv
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    lines = open(path).read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header found")
    rows = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ms = float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]
        rows.append((int(r["ID"]), r["Kernel Name"], ms))
    rows.sort()
    adam = [i for i, (_, name, _) in enumerate(rows) if name.startswith("adam_update")]
    if not adam:
        sys.exit(f"{path}: no adam_update launches (not a training run with FusedAdam?)")
    # The last step's Adam launches are the final run of consecutive-ish adam launches; count
    # the parameter tensors as the launches after the previous step's.
    per_step = len(adam) // 2 if len(adam) % 2 == 0 else len(adam)
    first = adam[-per_step - 1] + 1 if len(adam) > per_step else 0
    step = rows[first:]
    total = defaultdict(float)
    count = defaultdict(int)
    for _, name, ms in step:
        total[name] += ms
        count[name] += 1
    print(f"{len(step)} launches, {sum(total.values()):.1f} ms of GPU time in the last step "
          f"({per_step} Adam launches per step)\n")
    print("| kernel | launches | total ms | % | mean us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    all_ms = sum(total.values())
    for name in sorted(total, key=lambda n: -total[n])[:top]:
        short = name if len(name) <= 100 else name[:97] + "..."
        print(f"| `{short}` | {count[name]} | {total[name]:.2f} | {100 * total[name] / all_ms:.1f} | "
              f"{1000 * total[name] / count[name]:.1f} |")


if __name__ == "__main__":
    main()
