#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

Modules should form layers: a module may use the modules below it, never one that uses it back
(directly or through others). This checks that for every crate target of the workspace (each
`src/lib.rs`, `src/main.rs` and `src/bin/*.rs`, and the modules they declare with `mod x;`):

* every path a file names in code (`use` trees and inline paths, comments and strings left out)
  is resolved to the module that defines the item, following `pub use` re-exports;
* a reference from module `a::x::…` to module `a::y::…` is an edge `x → y` between the two
  siblings under their common parent `a` (the crate root for top modules); a reference between a
  module and one of its own ancestors or descendants is no edge (a parent declares its children,
  children use what the parent re-exports);
* every strongly connected group of siblings is reported, with the file and line of each edge.

    scripts/module-cycles.py                 # every crate under crates/ and examples/, and tests/
    scripts/module-cycles.py crates/ferrybus-sea-orm
    scripts/module-cycles.py --graph crates/ferrybus-sea-orm   # also print the edges

A reference on a line ending in the comment `// module-cycles: allow (<why>)`, or on the line
after a line holding only that comment, is left out: for dependencies that are mutual by nature
(sea-orm entities declare each relation from both tables). Say why in the comment.

Exit status 1 when a cycle exists. It reads the source text only (no cargo, no compiler), so
`cfg`-gated code counts as if enabled and `#[path]` attributes are not followed.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """The source with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}'), or a lifetime / label ('a, 'static).
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of segments, () for the crate root
        self.file = file
        self.code = ""
        self.items = set()  # names defined here
        self.exports = {}  # name -> absolute path (tuple) it re-exports
        self.globs = []  # absolute module paths re-exported with `*`
        self.uses = []  # (absolute path, line)
        self.allowed = set()  # lines whose references are left out


def child_file(module_file, is_dir_owner, name):
    base = os.path.dirname(module_file)
    if not is_dir_owner:
        base = os.path.join(base, os.path.splitext(os.path.basename(module_file))[0])
    for candidate in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def load_target(root_file):
    """Every module of the crate target whose root is `root_file`."""
    modules = {}

    def visit(path, file, dir_owner):
        module = Module(path, file)
        modules[path] = module
        with open(file, encoding="utf-8") as f:
            text = f.read()
        module.code = strip(text)
        for number, line in enumerate(text.split("\n"), start=1):
            if ALLOW.search(line):
                module.allowed.add(number)
                if line.strip().startswith("//"):
                    module.allowed.add(number + 1)
        for m in re.finditer(rf"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*;", module.code):
            child = child_file(file, dir_owner, m.group(1))
            if child:
                visit(path + (m.group(1),), child, os.path.basename(child) == "mod.rs")

    visit((), root_file, True)
    return modules


def line_of(code, offset):
    return code.count("\n", 0, offset) + 1


def split_top(text, sep=","):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def use_tree(tree, prefix=()):
    """(segments, alias or None, is_glob) for each leaf of a `use` tree."""
    tree = tree.strip()
    if tree.startswith("::"):
        tree = tree[2:]
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if m:
        head = [s for s in m.group(1).split("::") if s.strip()]
        head = tuple(s.strip() for s in head)
        for part in split_top(m.group(2)):
            yield from use_tree(part, prefix + head)
        return
    alias = None
    am = re.match(rf"^(.*?)\s+as\s+({IDENT})$", tree, re.S)
    if am:
        tree, alias = am.group(1), am.group(2)
    segs = tuple(s.strip() for s in tree.split("::") if s.strip())
    if segs and segs[-1] == "*":
        yield prefix + segs[:-1], None, True
    elif segs == ("self",):
        yield prefix, alias, False
    else:
        yield prefix + segs, alias, False


def absolute(module, segs, modules):
    """The absolute path of `segs` as written in `module`; None for another crate's path."""
    if not segs:
        return None
    head, rest = segs[0], segs[1:]
    if head in ("crate", "$crate"):
        return rest
    if head == "self":
        return module.path + rest
    if head == "super":
        base = module.path
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
        if segs and segs[0] == "self":
            segs = segs[1:]
        return base + segs
    # A path relative to this module (a child module, or an item declared or imported here).
    if module.path + (head,) in modules:
        return module.path + segs
    return None


def resolve(path, modules, seen=None):
    """The module that defines what `path` names (following re-exports)."""
    seen = seen or set()
    if path in seen:
        return None
    seen.add(path)
    best = ()
    for k in range(len(path), -1, -1):
        if path[:k] in modules:
            best = path[:k]
            break
    rest = path[len(best):]
    if not rest:
        return best
    module, name = modules[best], rest[0]
    if name in module.items:
        return best
    if name in module.exports:
        target = module.exports[name]
        return resolve(target + rest[1:], modules, seen) or best
    for glob in module.globs:
        if glob in modules and (name in modules[glob].items or name in modules[glob].exports):
            return resolve(glob + rest, modules, seen) or best
    return best


ALLOW = re.compile(r"//\s*module-cycles:\s*allow\b")

ITEM = re.compile(
    rf"\b(?:fn|struct|enum|trait|const|static|type|union|mod)\s+({IDENT})|macro_rules!\s*({IDENT})"
)


def analyse(modules):
    for module in modules.values():
        code = module.code
        module.items = {a or b for a, b in ITEM.findall(code)}
        # `use` statements, visibility noted for re-exports.
        for m in re.finditer(r"(?s)\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", code):
            line = line_of(code, m.start())
            for segs, alias, glob in use_tree(m.group(2)):
                path = absolute(module, segs, modules)
                if path is None:
                    continue
                module.uses.append((path, line))
                if m.group(1):
                    if glob:
                        module.globs.append(path)
                    elif path:
                        module.exports[alias or path[-1]] = path
        # Inline paths: crate::a::b, super::x, self::y, $crate::z.
        for m in re.finditer(rf"(?<![\w:])(\$?crate|super|self)((?:\s*::\s*(?:{IDENT}))+)", code):
            before = code[max(0, m.start() - 200):m.start()]
            if re.search(r"\buse\s+[^;]*$", before):
                continue  # part of a `use` tree, counted above
            segs = (m.group(1),) + tuple(s.strip() for s in m.group(2).split("::") if s.strip())
            path = absolute(module, segs, modules)
            if path is not None:
                module.uses.append((path, line_of(code, m.start())))


def edges(modules):
    """{parent: {(a, b): [(file, line), ...]}} between sibling modules under `parent`."""
    graph = defaultdict(lambda: defaultdict(list))
    for module in modules.values():
        for path, line in module.uses:
            if line in module.allowed:
                continue
            target = resolve(tuple(path), modules)
            if target is None:
                continue
            a, b = module.path, target
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k == len(a) or k == len(b):
                continue  # the same module, an ancestor or a descendant
            graph[a[:k]][(a[k], b[k])].append((module.file, line))
    return graph


def cycles(pairs):
    """The strongly connected groups (of two or more) of a graph given as edge pairs."""
    succ = defaultdict(set)
    for a, b in pairs:
        succ[a].add(b)
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(list(succ)):
        if v not in index:
            connect(v)
    return groups


def targets(crate_dir):
    src = os.path.join(crate_dir, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(src, f))]
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        for entry in sorted(os.listdir(bins)):
            full = os.path.join(bins, entry)
            if entry.endswith(".rs"):
                roots.append(full)
            elif os.path.isfile(os.path.join(full, "main.rs")):
                roots.append(os.path.join(full, "main.rs"))
    return roots


def crate_dirs(root):
    found = []
    for parent in ("crates", "examples"):
        base = os.path.join(root, parent)
        if os.path.isdir(base):
            for entry in sorted(os.listdir(base)):
                if os.path.isfile(os.path.join(base, entry, "Cargo.toml")):
                    found.append(os.path.join(base, entry))
    if os.path.isfile(os.path.join(root, "tests", "Cargo.toml")):
        found.append(os.path.join(root, "tests"))
    return found


def name(parent, module):
    return "::".join(("crate",) + parent + (module,))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crates", nargs="*", help="crate directories (default: every crate)")
    parser.add_argument("--graph", action="store_true", help="print every edge too")
    args = parser.parse_args()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dirs = args.crates or crate_dirs(root)
    found = 0
    for crate_dir in dirs:
        for root_file in targets(crate_dir):
            modules = load_target(root_file)
            analyse(modules)
            graph = edges(modules)
            rel = os.path.relpath(root_file, root)
            if args.graph:
                for parent, pairs in sorted(graph.items()):
                    for (a, b), where in sorted(pairs.items()):
                        f, line = where[0]
                        print(f"{rel}: {name(parent, a)} -> {name(parent, b)}  ({os.path.relpath(f, root)}:{line})")
            for parent, pairs in sorted(graph.items()):
                for group in cycles(pairs):
                    found += 1
                    members = set(group)
                    print(f"{rel}: cycle between {', '.join(name(parent, g) for g in group)}")
                    for (a, b), where in sorted(pairs.items()):
                        if a in members and b in members:
                            places = ", ".join(f"{os.path.relpath(f, root)}:{line}" for f, line in where[:3])
                            more = f" (+{len(where) - 3})" if len(where) > 3 else ""
                            print(f"    {a} -> {b}: {places}{more}")
    if found:
        sys.exit(f"module-cycles: {found} cycle(s)")
    print(f"module-cycles: no module imports one that imports it back ({len(dirs)} crate(s))")


if __name__ == "__main__":
    main()
