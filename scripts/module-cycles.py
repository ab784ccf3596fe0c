#!/usr/bin/env python3
"""Fails when, within a crate, a module imports one that imports it back.

For every crate given (default: every crate under crates/), each source file is a module; an
edge A -> B is a `crate::b::…` path, a `super::…` path or a `use` of a sibling module in A's
code (comments and `#[cfg(test)] mod tests` blocks left out). Two views are checked:

* top-level modules (`crate::a` <-> `crate::b`), and
* files: a `mod.rs` (or `lib.rs`) that declares and re-exports its children is above them, so a
  child that imports from its parent's own items closes a cycle too.

Usage: scripts/module-cycles.py [CRATE_DIR ...]
"""
import os
import re
import sys
from pathlib import Path

PATH_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def strip_comments_and_tests(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # Drop `#[cfg(test)] mod … { … }` blocks (brace matching).
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def module_path(src, file):
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def resolve(current, is_dir_module, kind, segments, modules):
    if kind == "crate":
        base = ()
    else:  # super
        base = current if is_dir_module else current[:-1]
        base = base[:-1]
        while segments and segments[0] == "super":
            base, segments = base[:-1], segments[1:]
    path = base
    for seg in segments:
        if path + (seg,) in modules:
            path = path + (seg,)
        else:
            break
    return path


def check_crate(crate):
    src = crate / "src"
    if not src.is_dir():
        return []
    files = [p for p in src.rglob("*.rs")]
    modules = {module_path(src, f): f for f in files}
    edges = {m: set() for m in modules}
    for mod, file in modules.items():
        is_dir_module = file.name in ("mod.rs", "lib.rs", "main.rs")
        text = strip_comments_and_tests(file.read_text())
        for m in PATH_RE.finditer(text):
            kind = m.group(1)
            segments = [s for s in m.group(2).split("::") if s]
            target = resolve(mod, is_dir_module, kind, segments, modules)
            if target != mod and not (target == () and kind == "crate" and not segments):
                edges[mod].add(target)
        # `mod child; pub use child::…` in a directory module: the parent is above its children.
        if is_dir_module:
            for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([a-z_][a-z0-9_]*)::", text, re.M):
                child = mod + (m.group(1),)
                if child in modules:
                    edges[mod].add(child)
    problems = []
    # file view: cycles of length 2 (a imports b, b imports a); ancestors count as importing
    # their children only through the edges found above.
    for a, targets in edges.items():
        for b in targets:
            if a in edges.get(b, ()) and a < b:
                problems.append(f"{crate.name}: {fmt(a)} <-> {fmt(b)}")
    # top-level view
    top = {}
    for a, targets in edges.items():
        for b in targets:
            ta, tb = a[:1], b[:1]
            if ta and tb and ta != tb:
                top.setdefault(ta, set()).add(tb)
    for cycle in cycles(top):
        problems.append(f"{crate.name}: top-level cycle " + " -> ".join(fmt(m) for m in cycle))
    return problems


def cycles(graph):
    found, seen = [], set()

    def visit(node, stack):
        if node in stack:
            cycle = stack[stack.index(node):] + [node]
            key = frozenset(cycle)
            if key not in seen:
                seen.add(key)
                found.append(cycle)
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, stack + [node])

    for node in sorted(graph):
        visit(node, [])
    return found


def fmt(module):
    return "crate" if not module else "crate::" + "::".join(module)


def main():
    root = Path(__file__).resolve().parent.parent
    crates = [Path(a) for a in sys.argv[1:]] or sorted((root / "crates").iterdir())
    problems = [p for crate in crates for p in check_crate(crate)]
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import cycle(s)", file=sys.stderr)
        sys.exit(1)
    print(f"no import cycles in {len(crates)} crate(s)")


if __name__ == "__main__":
    main()
