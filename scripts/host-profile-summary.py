#!/usr/bin/env python3
"""Summarise a folded host profile (`medddpm bench --host-profile`): per thread, the functions
with the most self and inclusive samples, and the share of samples under each crate.

usage: host-profile-summary.py FILE.folded [--top N] [--under NAME]
  --under NAME  only stacks that pass through a frame containing NAME (e.g. `micro_step`)
"""
import argparse
import collections
import re


def crate_of(frame):
    # `<burn_fusion::stream::X as Y>::f` -> burn_fusion; `cubecl_cuda::compute::f` -> cubecl_cuda
    m = re.match(r"[<&\s]*(?:dyn\s+)?([A-Za-z_][A-Za-z0-9_]*)::", frame)
    return m.group(1) if m else frame.split("::")[0][:40]


def short(frame, width=150):
    frame = re.sub(r"::\{\{closure\}\}", "::{closure}", frame)
    return frame if len(frame) <= width else frame[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--under", default=None)
    args = ap.parse_args()
    threads = collections.Counter()
    self_c = collections.defaultdict(collections.Counter)
    incl_c = collections.defaultdict(collections.Counter)
    crate_self = collections.defaultdict(collections.Counter)
    for line in open(args.file):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        count = int(count)
        frames = stack.split(";")
        thread, frames = frames[0], frames[1:]
        if args.under and not any(args.under in f for f in frames):
            continue
        threads[thread] += count
        if frames:
            self_c[thread][frames[-1]] += count
            crate_self[thread][crate_of(frames[-1])] += count
        for f in set(frames):
            incl_c[thread][f] += count
    total = sum(threads.values())
    print(f"{total} samples" + (f" under `{args.under}`" if args.under else ""))
    for thread, n in threads.most_common():
        print(f"\n== thread {thread}: {n} samples ({100 * n / max(total, 1):.1f}%)")
        print("-- self, by crate")
        for c, k in crate_self[thread].most_common(15):
            print(f"{100 * k / n:6.1f}%  {c}")
        print("-- self, by function")
        for f, k in self_c[thread].most_common(args.top):
            print(f"{100 * k / n:6.1f}%  {short(f)}")
        print("-- inclusive, by function")
        for f, k in incl_c[thread].most_common(args.top * 2):
            print(f"{100 * k / n:6.1f}%  {short(f)}")


if __name__ == "__main__":
    main()
