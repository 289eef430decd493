#!/usr/bin/env python3
"""Issue 37's import rule: inside every crate, no circle between modules.

Each source file is a module (`lib.rs`/`main.rs` the root, `a/mod.rs` or `a.rs` the module `a`,
`#[path]` attributes followed). Every path the code names (`use crate::...`, `super::...`,
`crate::a::f(...)` in expressions, outside comments) is an edge from the file's module to the
deepest module the path reaches. A module using its ancestors (a child reading its parent's
items) or its descendants (a parent re-exporting its children) is how Rust is written; any other
edge is lifted to the two siblings under the modules' lowest common ancestor: `a::x` using
`b::y` means `a` uses `b`. Under each parent the siblings' graph must have no circle, which
rules out both a circle of files and an import that runs back up between layers (`norm` using
`conv` while `conv` uses `norm`). Crates themselves cannot form circles (cargo refuses them).
Prints each circle with its edges and where each is written; exits 1 if any.
Usage: python3 scripts/check-imports.py [crates]"""
import os
import re
import sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else 'crates'
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')
PLAIN_MOD = re.compile(r'^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', re.M)
PATH = re.compile(r'\b((?:crate|super|self)(?:::(?:super|\w+))+)')


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def strip_tests(text):
    """The file up to its first top-level `#[cfg(test)]` (tests may import anything)."""
    m = re.search(r'^#\[cfg\(test\)\]', text, re.M)
    return text[:m.start()] if m else text


def modules_of(src):
    """{module path tuple: file} for one crate's src folder, following `mod` declarations."""
    found = {}
    for top in ('lib.rs', 'main.rs'):
        start = os.path.join(src, top)
        if os.path.exists(start):
            walk(start, (), found, is_root=True)
    return found


def walk(path, module, found, is_root=False):
    if module in found or not os.path.exists(path):
        return
    found[module] = path
    text = strip_comments(open(path).read())
    here = os.path.dirname(path)
    base = os.path.basename(path)
    # Where child modules live: beside lib.rs/mod.rs, else in a folder named after the file.
    if is_root or base == 'mod.rs':
        folder = here
    else:
        folder = os.path.join(here, base[:-3])
    explicit = {name: target for target, name in PATH_ATTR.findall(text)}
    for name in PLAIN_MOD.findall(text):
        if name in explicit:
            # A `#[path]` on a file's module declaration is relative to that file's folder.
            child = os.path.normpath(os.path.join(here, explicit[name]))
        else:
            child = os.path.join(folder, name + '.rs')
            if not os.path.exists(child):
                child = os.path.join(folder, name, 'mod.rs')
        walk(child, module + (name,), found)


USE = re.compile(r'^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);', re.M)


def reexports_of(known):
    """{(module, name): path written} for every `pub use` of every module."""
    out = {}
    for module, path in known.items():
        text = strip_tests(strip_comments(open(path).read()))
        for body in USE.findall(text):
            body = re.sub(r'\s+', '', re.sub(r'\s+as\s+', '@', body))
            for written, name in expand(body):
                if name != '*':
                    out[(module, name)] = written
    return out


def expand(body, prefix=''):
    """(path, name it is known by) for each item of a use tree such as `a::{b,c::D@E}` (`@` for ` as `)."""
    if '{' in body:
        head, inner = body.split('{', 1)
        inner = inner[:inner.rfind('}')]
        items, depth, cur = [], 0, ''
        for ch in inner:
            if ch == ',' and depth == 0:
                items.append(cur)
                cur = ''
                continue
            depth += ch == '{'
            depth -= ch == '}'
            cur += ch
        items.append(cur)
        out = []
        for item in filter(None, (i.strip() for i in items)):
            out += expand(item, prefix + head)
        return out
    full = prefix + body
    if '@' in full:
        full, name = full.split('@')
        return [(full, name)]
    last = full.split('::')[-1]
    if last == 'self':
        full = full[:-len('::self')]
        last = full.split('::')[-1]
    return [(full, last)]


def resolve(module, path, known, reexports, depth=0):
    """The deepest known module `path` (as written in `module`) reaches, or None; a name
    re-exported by that module (`pub use`) is followed to where it is defined."""
    found, rest = reach(module, path, known)
    if found is not None and rest and (found, rest[0]) in reexports and depth < 8:
        deeper = resolve(found, reexports[(found, rest[0])], known, reexports, depth + 1)
        if deeper is not None:
            return deeper
    return found


def reach(module, path, known):
    """The deepest known module `path` (as written in `module`) reaches (None if none) and the
    names after it."""
    parts = path.split('::')
    at, rest = ((), parts[1:]) if parts[0] == 'crate' else (module, parts)
    while rest and rest[0] in ('self', 'super'):
        at = at[:-1] if rest[0] == 'super' else at
        rest = rest[1:]
    best = at if at in known else None
    after = rest
    for i, name in enumerate(rest):
        at = at + (name,)
        if at not in known:
            break
        best, after = at, rest[i + 1:]
    return best, after


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def check_crate(crate_dir):
    src = os.path.join(crate_dir, 'src')
    known = modules_of(src)
    reexports = reexports_of(known)
    # (parent, a, b) -> [(file, path written)]
    edges = defaultdict(list)
    for module, path in known.items():
        text = strip_tests(strip_comments(open(path).read()))
        for written in set(PATH.findall(text)):
            target = resolve(module, written, known, reexports)
            if target is None or target == module:
                continue
            n = 0
            while n < min(len(module), len(target)) and module[n] == target[n]:
                n += 1
            if n == len(module) or n == len(target):
                continue  # ancestor or descendant
            parent = module[:n]
            edges[(parent, module[n], target[n])].append((path, written))
    graph = defaultdict(lambda: defaultdict(set))
    for (parent, a, b) in edges:
        graph[parent][a].add(b)
    problems = []
    for parent, g in graph.items():
        for comp in circles(g):
            where = '::'.join(('crate',) + parent)
            lines = [f'{os.path.basename(crate_dir)}: circle under {where}: {" <-> ".join(comp)}']
            members = set(comp)
            for a in comp:
                for b in sorted(g[a] & members):
                    for file, written in sorted(edges[(parent, a, b)])[:3]:
                        lines.append(f'    {a} -> {b}: {file} names {written}')
            problems.append('\n'.join(lines))
    return problems


def main():
    problems = []
    for name in sorted(os.listdir(root)):
        crate_dir = os.path.join(root, name)
        if os.path.isdir(os.path.join(crate_dir, 'src')):
            problems += check_crate(crate_dir)
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} circle(s) between modules')
        sys.exit(1)
    print('ok: no circle between the modules of any crate')


main()
