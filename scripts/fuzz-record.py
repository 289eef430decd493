#!/usr/bin/env python3
"""Runs the property fuzzing of the readers of untrusted input at scale and records its figures
in docs/reliability.md (between the `fuzz-record` markers): inputs per reader, what each did
(read or refused, and how many a claim check refused), time, the largest allocation of one
input, the process's peak memory, and the findings (a failing reader's first input).

    python3 scripts/fuzz-record.py                 # 200,000 inputs per reader (1,000,000 in all)
    python3 scripts/fuzz-record.py --inputs 2000   # a quick look; --no-write leaves the doc alone

The tests are `crates/medddpm-train/tests/all/fuzz_inputs.rs` (one `fuzz-record` line each);
they run in a release build, one at a time, under GNU time for the peak memory.
"""

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "reliability.md")
START, END = "<!-- fuzz-record:start -->", "<!-- fuzz-record:end -->"
NAMES = {
    "nifti": "NIfTI reader",
    "nifti-claim": "NIfTI header claims over gzip streams",
    "mask": "mask encoder",
    "experiment": "experiment parser + `validate`",
    "checkpoint": "checkpoint loader",
}


def cargo(inputs, no_run):
    command = ["cargo", "test", "--release", "-p", "medddpm-train", "--test", "all"]
    if no_run:
        return subprocess.run(command + ["--no-run"], cwd=ROOT, check=True)
    env = dict(os.environ, MEDDDPM_FUZZ_INPUTS=str(inputs))
    timed = ["/usr/bin/time", "-v"] + command + ["fuzz_", "--", "--nocapture", "--test-threads", "1"]
    start = time.monotonic()
    out = subprocess.run(timed, cwd=ROOT, env=env, capture_output=True, text=True)
    return out, time.monotonic() - start


def parse(text):
    rows = []
    for line in text.splitlines():
        # With --nocapture the test's name may precede the line on the same row.
        if "fuzz-record " not in line:
            continue
        line = line[line.index("fuzz-record "):]
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        rows.append(fields)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    findings = [l.strip() for l in text.splitlines() if "input saved to" in l]
    failed = re.findall(r"^    (fuzz_inputs::\S+)$", text, re.M)
    return rows, (int(rss.group(1)) / 1024 if rss else None), findings, failed


def section(rows, seconds, rss_mib, findings, failed, inputs):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    total = sum(int(r["inputs"]) for r in rows)
    lines = [
        START,
        f"The recorded run ({datetime.date.today()}, commit {commit}, `python3 scripts/fuzz-record.py"
        f"{'' if inputs == 200000 else f' --inputs {inputs}'}`, {os.cpu_count()} cores of {cpu}, "
        f"release build): **{total:,} inputs in {seconds:.0f} s** (the tests' own time; the build "
        f"not counted), peak RSS {rss_mib:,.0f} MiB.",
        "",
        "| reader | inputs | read / valid | refused | of which by the header's claim | largest allocation of one input | seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        claim = r.get("refused_by_claim", "")
        lines.append(
            f"| {NAMES.get(r['reader'], r['reader'])} | {int(r['inputs']):,} | {int(r['ok']):,} | "
            f"{int(r['refused']):,} | {int(claim):,} | {int(r['peak_bytes']) / 1024:,.0f} KiB | {r['seconds']} |"
            if claim else
            f"| {NAMES.get(r['reader'], r['reader'])} | {int(r['inputs']):,} | {int(r['ok']):,} | "
            f"{int(r['refused']):,} | | {int(r['peak_bytes']) / 1024:,.0f} KiB | {r['seconds']} |")
    lines.append("")
    if findings or failed:
        lines.append("**Findings** (each a failing input, saved where it says):")
        lines.extend(f"- {f}" for f in findings or failed)
    else:
        lines.append("Findings: none (no panic, no input allocating more than 64 MiB, every error "
                     "naming its input).")
    lines.append(END)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=200000, help="inputs per reader")
    ap.add_argument("--no-write", action="store_true", help="print, do not edit the doc")
    args = ap.parse_args()
    cargo(args.inputs, no_run=True)
    out, seconds = cargo(args.inputs, no_run=False)
    text = out.stdout + out.stderr
    rows, rss, findings, failed = parse(text)
    if not rows:
        sys.exit("no fuzz-record lines in the output:\n" + text[-3000:])
    run_seconds = sum(float(r["seconds"]) for r in rows)
    result = section(rows, run_seconds, rss or 0.0, findings, failed, args.inputs)
    print(result)
    if args.no_write:
        return 1 if out.returncode else 0
    doc = open(DOC).read()
    if START in doc:
        doc = doc[:doc.index(START)] + result + doc[doc.index(END) + len(END):]
    else:
        sys.exit(f"{DOC} has no {START} marker")
    open(DOC, "w").write(doc)
    print(f"wrote {DOC}")
    return 1 if out.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
