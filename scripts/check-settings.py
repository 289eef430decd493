#!/usr/bin/env python3
"""Issue 37's rules for what the library crates may do (run by CI):

- no library crate prints (`println!`, `eprintln!`, `print!`, `eprint!` outside tests): they
  report through the `log` facade or return values, and the binary, `medddpm-cli`, prints;
- no library crate defines command-line flags (depends on `clap`);
- every `MEDDDPM_*` environment variable the code reads is in README.md's table of them.

A file's test part starts at its first top-level `#[cfg(test)]`; `tests.rs` files and `tests/`
and `benches/` folders are tests. Exits 1 on a violation.
Usage: python3 scripts/check-settings.py [crates]"""
import os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else 'crates'
BINARY = 'medddpm-cli'
PRINT = re.compile(r'\b(e?println|e?print)!\s*\(')
VARIABLE = re.compile(r'MEDDDPM_[A-Z0-9_]+')


def non_test_text(path):
    lines = open(path).read().split('\n')
    for i, line in enumerate(lines):
        if line.startswith('#[cfg(test)]'):
            return lines[:i]
    return lines


problems = []
variables = {}
for crate in sorted(os.listdir(root)):
    src = os.path.join(root, crate, 'src')
    if not os.path.isdir(src):
        continue
    toml = open(os.path.join(root, crate, 'Cargo.toml')).read()
    deps = toml.split('[dependencies]', 1)[-1].split('\n[', 1)[0]
    if crate != BINARY and re.search(r'^clap\s*=', deps, re.M):
        problems.append(f'{crate}: a library crate depends on clap (flags belong to {BINARY})')
    for d, _, fs in os.walk(src):
        for f in fs:
            if not f.endswith('.rs'):
                continue
            path = os.path.join(d, f)
            testfile = f == 'tests.rs' or '/tests' in d
            for n, line in enumerate(non_test_text(path), 1):
                code = re.sub(r'"(\\.|[^"\\])*"', '""', line).split('//')[0]
                if crate != BINARY and not testfile and PRINT.search(code):
                    problems.append(f'{path}:{n}: a library crate prints: {line.strip()}')
                for v in VARIABLE.findall(line):
                    variables.setdefault(v, f'{path}:{n}')

readme = open(os.path.join(os.path.dirname(os.path.abspath(root)), 'README.md')).read()
table = readme.split('**Environment variables.**', 1)
listed = set(re.findall(r'^\| `(MEDDDPM_[A-Z0-9_]+)', table[1], re.M)) if len(table) > 1 else set()
for v, where in sorted(variables.items()):
    if v not in listed:
        problems.append(f'{where}: {v} is read but not in README.md\'s table of environment variables')

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f'ok: no library crate prints or depends on clap; the {len(variables)} MEDDDPM_* variables are in README.md')
