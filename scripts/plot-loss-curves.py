#!/usr/bin/env python3
"""Overlay the loss curves of training runs (their metrics.jsonl) in one PNG.

Usage: scripts/plot-loss-curves.py OUT.png LABEL=runs/a/metrics.jsonl LABEL=runs/b/metrics.jsonl ...
Needs matplotlib (pip install matplotlib). Prints the largest relative difference of each run's
loss from the first run's at the same step.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, losses = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                steps.append(r["step"])
                losses.append(r["loss"])
    return steps, losses


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        runs.append((label, *read(path)))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    styles = ["-", "--", ":", "-."]
    for i, (label, steps, losses) in enumerate(runs):
        ax.plot(steps, losses, styles[i % len(styles)], label=label, linewidth=1.4)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("L1 noise loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    base = dict(zip(runs[0][1], runs[0][2]))
    for label, steps, losses in runs[1:]:
        diffs = [abs(l - base[s]) / abs(base[s]) for s, l in zip(steps, losses) if s in base]
        first_over = next((s for s, l in zip(steps, losses) if s in base and abs(l - base[s]) > 1e-3 * abs(base[s])), None)
        print(f"{label}: {len(diffs)} common steps, largest relative difference from {runs[0][0]} "
              f"{max(diffs):.2e}, first step over 1e-3: {first_over}, final loss {losses[-1]:.4f} "
              f"vs {runs[0][2][-1]:.4f}")


if __name__ == "__main__":
    main()
