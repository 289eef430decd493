#!/usr/bin/env python3
"""Issue 13's size rules: no source file over 500 lines and no function over 80, outside tests.

A file's test part starts at its first top-level `#[cfg(test)]` on a `mod` (a `#[cfg(test)]` on
an import does not end the measured part); `tests.rs` files and `tests/`
folders are tests. Function bodies are measured by their braces. Exits 1 on a violation.
Usage: python3 scripts/check-layout.py [crates]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else 'crates'
files = []
for d, _, fs in os.walk(root):
    if '/tests' in d or '/benches' in d: continue
    for f in fs:
        if f.endswith('.rs') and '/src' in d and f != 'tests.rs' and not d.endswith('/tests'):
            files.append(os.path.join(d, f))
big = []; longf = []
for p in files:
    lines = open(p).read().split('\n')
    # cut at the first top-level #[cfg(test)] module
    n = len(lines)
    for i, l in enumerate(lines):
        if l.startswith("#[cfg(test)]") and i + 1 < len(lines) and lines[i + 1].startswith("mod "):
            n = i; break
    big.append((n, len(lines), p))
    # functions
    i = 0
    while i < n:
        l = lines[i]
        m = re.match(r'\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)', l)
        if m and not l.strip().startswith('//'):
            # find opening brace
            depth = 0; started = False; j = i
            while j < n:
                s = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j])
                s = re.sub(r"'(\\.|[^'\\])'", "''", s)
                s = s.split('//')[0]
                for c in s:
                    if c == '{': depth += 1; started = True
                    elif c == '}': depth -= 1
                if started and depth == 0: break
                if not started and s.rstrip().endswith(';'): break
                j += 1
            if started:
                ln = j - i + 1
                if ln > 80: longf.append((ln, p, i + 1, m.group(7)))
            i = i + 1
        else:
            i += 1
bad = [b for b in big if b[0] >= 500]
print('Files over 500 non-test lines:')
for n, t, p in sorted(big, reverse=True):
    if n >= 500: print(f'  {n:5} ({t}) {p}')
print('Functions over 80 lines:')
for ln, p, i, name in sorted(longf, reverse=True):
    print(f'  {ln:4} {p}:{i} {name}')
if bad or longf:
    sys.exit(1)
print('ok: every source file under 500 lines, every function under 80, outside tests')
