"""The shape of the code: imports run one way, and no file or class outgrows a reader.

The layer table and the import walk are in tests/unit/layers.py (`python tests/unit/layers.py` prints
what is wrong). Type-only and function-local imports count like any other.
"""

from __future__ import annotations

import ast

from tests.unit.layers import ROOT, cycles, graph, layer_of, upward

MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
SIZE_REASON = "Size:"  # a longer class says why in its docstring, in a paragraph starting with this


def test_every_package_has_a_layer() -> None:
    for module in graph():
        layer_of(module)


def test_no_import_cycle_between_files() -> None:
    assert cycles(graph()) == []


def test_no_import_runs_up_the_layers() -> None:
    assert upward(graph()) == []


def test_no_module_too_long() -> None:
    long = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_class_too_long_without_a_reason() -> None:
    long = []
    for p in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if n > MAX_CLASS_LINES and SIZE_REASON not in (ast.get_docstring(node) or ""):
                    long.append(f"{p.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []
