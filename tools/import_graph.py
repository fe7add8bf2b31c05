"""Count the project's import cycles and function-level imports (the layering report of docs/architecture.md).

    python tools/import_graph.py [--root DIR] [--cycles] [--inner] [--json]

Reads every .py file of the four rooms (debugkit, backends, native, tools) with `ast`, without importing anything,
and prints:

* imports: how many import statements name a project module, and how many of them sit inside a function;
* cycles: the strongly connected components of the module graph (every import counts, at module level or inside a
  function: a function-level import hides a cycle, it does not remove it), with their size;
* upward: imports that go against the room order tools -> debugkit -> backends -> native, and imports of the
  builder from backends/engine/runtime.

`--cycles` lists each cycle's modules, `--inner` each function-level project import (file:line module).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys

ROOMS = ("tools", "debugkit", "backends", "native")   # each may import only the rooms after it
RANK = {room: i for i, room in enumerate(ROOMS)}


def module_name(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def project_files(root: str):
    for room in ROOMS:
        for base, dirs, files in os.walk(os.path.join(root, room)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for f in sorted(files):
                if f.endswith(".py"):
                    yield os.path.join(base, f)


class Import:
    """One import of a project module: where it is, what it names, and whether it runs inside a function."""

    def __init__(self, src, target, line, inner, comment):
        self.src, self.target, self.line, self.inner, self.comment = src, target, line, inner, comment

    def __repr__(self):
        return f"{self.src}:{self.line} -> {self.target}{' (in a function)' if self.inner else ''}"


def _resolve(src: str, is_pkg: bool, node) -> list[tuple[str, list[str]]]:
    """(module, [submodule candidates]) per name an Import/ImportFrom node imports (relative imports resolved
    against `src`): `from a.b import c` is a.b.c when that is a module, else a.b."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    base = node.module or ""
    if node.level:
        parts = src.split(".")
        if not is_pkg:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    # `from pkg import mod` names the submodule (its package runs first, as for every import: not an edge)
    return [(base, [f"{base}.{a.name}" for a in node.names])]


def _under_type_checking(parents) -> bool:
    return any(isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in parents)


def scan(root: str):
    """(modules, imports): every project module name, and every import of a project module."""
    paths = {module_name(root, p): p for p in project_files(root)}
    modules = set(paths)
    imports = []
    for src, path in paths.items():
        text = open(path, encoding="utf-8").read()
        lines = text.splitlines()
        tree = ast.parse(text, path)
        is_pkg = path.endswith("__init__.py")
        stack = [(tree, [])]
        while stack:
            node, parents = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)) and not _under_type_checking(parents + [node]):
                    inner = any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                                for p in parents + [node])
                    line = lines[child.lineno - 1] if child.lineno <= len(lines) else ""
                    comment = line.split("#", 1)[1].strip() if "#" in line else ""
                    seen = set()
                    names = []
                    for base, subs in _resolve(src, is_pkg, child):
                        found = [m for m in subs if m in modules]
                        names += found if found and len(found) == len(subs) else [base] + found
                    for name in names:
                        target = name if name in modules else None
                        if target is None:   # `import a.b.c` of an attribute: its nearest project module
                            parts = name.split(".")
                            while parts and ".".join(parts) not in modules:
                                parts.pop()
                            target = ".".join(parts) if parts else None
                        if target and target != src and target not in seen:
                            seen.add(target)
                            imports.append(Import(src, target, child.lineno, inner, comment))
                stack.append((child, parents + [node]))
    return modules, imports


def cycles(modules, imports) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    graph = {m: set() for m in modules}
    for imp in imports:
        graph[imp.src].add(imp.target)
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return sorted(out, key=lambda c: (-len(c), c))


def room(module: str) -> str:
    return module.split(".", 1)[0]


def upward(imports) -> list[Import]:
    """Imports against the room order, and backends/engine/runtime importing the builder."""
    bad = []
    for imp in imports:
        a, b = room(imp.src), room(imp.target)
        if a in RANK and b in RANK and RANK[b] < RANK[a]:
            bad.append(imp)
        elif imp.src.startswith("backends.engine.runtime") and imp.target.startswith("backends.engine.builder"):
            bad.append(imp)
    return bad


def report(root: str) -> dict:
    modules, imports = scan(root)
    statements = {(i.src, i.line): i for i in imports}
    inner = [i for i in statements.values() if i.inner]
    return {"modules": len(modules), "import_statements": len(statements), "function_level": len(inner),
            "cycles": cycles(modules, imports), "upward": [repr(i) for i in upward(imports)],
            "inner": sorted(f"{i.src}:{i.line} {i.target}" + (f"  # {i.comment}" if i.comment else "")
                            for i in inner)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--cycles", action="store_true", help="list each cycle's modules")
    ap.add_argument("--inner", action="store_true", help="list each function-level project import")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = report(args.root)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    sizes = ", ".join(str(len(c)) for c in r["cycles"]) or "none"
    print(f"modules: {r['modules']}  project import statements: {r['import_statements']}  "
          f"inside functions: {r['function_level']}")
    print(f"import cycles: {len(r['cycles'])} (modules per cycle: {sizes})")
    print(f"upward imports (against tools -> debugkit -> backends -> native, or runtime -> builder): "
          f"{len(r['upward'])}")
    for line in r["upward"]:
        print(f"  {line}")
    if args.cycles:
        for c in r["cycles"]:
            print(f"  cycle of {len(c)}: {' '.join(c)}")
    if args.inner:
        for line in r["inner"]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
