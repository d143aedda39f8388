#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a cycle.

For every crate under crates/, each source file is a module (`mod.rs` and `lib.rs` name their
directory's module). An edge A -> B is a path in A's non-test code that names B: `crate::b::...`,
`super::b::...` or `self::b::...` in `use` declarations and in expressions. A path to a parent
module's own item counts as an edge to the parent; a parent's `mod` declarations and re-exports of
its children (`pub use child::Item`) do not count, since they make the children its parts. Test modules (`#[cfg(test)] mod tests` and
what follows it) and files named `tests.rs` are left out: tests may reach anywhere. The same check
runs on folders: an edge between two of a crate's top-level modules (a folder and all below it)
for every edge between their parts, so that two folders never lean on each other even where no
two files do. Prints every cycle found; exit 1 if any.

    python3 scripts/check-module-cycles.py [REPOSITORY_ROOT]
"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent


def module_of(src: Path, file: Path):
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def code_of(file: Path) -> str:
    text = file.read_text()
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*[;{]", text)
    text = text[: cut.start()] if cut else text
    text = re.sub(r"//[^\n]*", "", text)
    # Path segments in `use` groups: `use crate::a::{b, c::d}` names a.b and a.c.
    return text


def expand_use(path: str):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (enough depth for this code base)."""
    m = re.match(r"^(.*?)\{(.*)\}$", path.strip())
    if not m:
        return [path.strip()]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            out.extend(expand_use(prefix + part.strip()))
    return out


def paths_in(code: str):
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", code, re.S):
        found.extend(expand_use(re.sub(r"\s+", "", m.group(1))))
    found.extend(re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", code))
    return found


def resolve(path: str, here: tuple, modules: set):
    segs = path.split("::")
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    else:
        return None
    target = base
    for seg in rest:
        if target + (seg,) in modules:
            target = target + (seg,)
        else:
            break
    return target


def cycles(edges):
    # Tarjan's strongly connected components.
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main():
    failed = False
    for crate in sorted((ROOT / "crates").iterdir()):
        src = crate / "src"
        if not src.is_dir():
            continue
        files = {module_of(src, f): f for f in src.rglob("*.rs")}
        modules = set(files)
        edges, folders = {}, {}
        for here, file in files.items():
            if file.name == "tests.rs":
                continue
            for path in paths_in(code_of(file)):
                target = resolve(path, here, modules)
                if target is not None and target != here:
                    edges.setdefault(here, set()).add(target)
                    # Between two top-level modules (the crate root is below them all).
                    if here and target and here[0] != target[0]:
                        folders.setdefault(here[:1], set()).add(target[:1])
        for kind, graph in (("modules", edges), ("top-level modules", folders)):
            for comp in cycles(graph):
                failed = True
                names = sorted("::".join(m) or "<root>" for m in comp)
                print(f"{crate.name}: {kind} in a cycle: {', '.join(names)}")
    if failed:
        sys.exit(1)
    print("no module cycles")


if __name__ == "__main__":
    main()
