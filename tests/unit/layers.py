"""The import graph of the `gregor` package: every import between its files, type-only ones included.

The layer table says which packages may import which: a package imports only from layers below
its own (and from itself). `check()` returns the violations: files that import each other in a
circle, and imports that run from a lower layer up to a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gregor"

# Bottom first. A top-level module or package of gregor/ belongs to exactly one layer.
LAYERS: list[tuple[str, ...]] = [
    ("", "configdef", "known_configs", "rate", "futures", "protocol"),
    ("storage", "security"),
    ("config",),
    ("metadata", "metrics", "client", "raft"),
    ("network", "admin", "schema_registry", "typed"),
    ("replication",),
    ("coordinator", "controller"),
    ("api",),
    ("broker",),
    ("tools", "console", "spark", "pipeline", "cli", "__main__"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """Every gregor module this file imports, wherever the import stands (TYPE_CHECKING, functions)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for n in names:
            if n.startswith("gregor"):
                target = _resolve(n, known)
                if target is not None and target != me:
                    out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    g = {m: imports_of(p, known) for m, p in known.items()}
    # A package's __init__ is imported on the way to any of its modules; a plain "from pkg import mod"
    # names both pkg and pkg.mod: keep the edge to the submodule only.
    for _m, targets in g.items():
        for t in list(targets):
            if any(o.startswith(t + ".") for o in targets) and known[t].name == "__init__.py":
                targets.discard(t)
    return g


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise KeyError(f"{module}: its package {top!r} is in no layer of tests/unit/layers.py")


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(g.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, targets in sorted(g.items()):
        for t in sorted(targets):
            if layer_of(t) > layer_of(m):
                bad.append(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})")
    return bad


if __name__ == "__main__":
    g = graph()
    for c in cycles(g):
        print("cycle:", " ".join(c))
    for line in upward(g):
        print("upward:", line)
