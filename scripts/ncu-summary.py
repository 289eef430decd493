#!/usr/bin/env python3
"""Sum the GPU time of every kernel in an `ncu --csv --metrics gpu__time_duration.sum` log by
kernel name, largest first.

Usage: scripts/ncu-summary.py NCU.csv [TOP [FROM_ID]]
Prints a Markdown table of the TOP kernels (default 50), counting only launches whose ncu ID is
at least FROM_ID (default 0: e.g. the first kernel of the last training step, to leave out
initialisation and the first step).
"""
import csv
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    from_id = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header found")
    total = defaultdict(float)
    count = defaultdict(int)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum" or int(row["ID"]) < from_id:
            continue
        try:
            value = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        name = row["Kernel Name"]
        total[name] += value * UNITS.get(row["Metric Unit"], float("nan"))
        count[name] += 1
    all_ms = sum(total.values())
    print(f"{sum(count.values())} kernels, {all_ms:.1f} ms of GPU time in all\n")
    print("| kernel | launches | total ms | % | mean us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        short = name if len(name) <= 110 else name[:107] + "..."
        short = short.replace("|", "\\|")
        print(f"| `{short}` | {count[name]} | {ms:.2f} | {100 * ms / all_ms:.1f} | {1000 * ms / count[name]:.1f} |")


if __name__ == "__main__":
    main()
