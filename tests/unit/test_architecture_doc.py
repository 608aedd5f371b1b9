"""docs/architecture.md stays true: every `file.py:name` it cites exists, and its layer table is the one
tests/unit/layers.py enforces. A rename that the page does not follow fails here, not in a newcomer's hands."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.layers import LAYERS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
# `gregor/replication/partition.py:Partition.fetch_records`, `tests/unit/layers.py:cycles`
REFERENCE = re.compile(r"`((?:gregor|tests)/[\w/]+\.py):([\w.]+)`")
LAYER_ROW = re.compile(r"^\| (\d+) \| (.+) \|$", re.MULTILINE)


def _defined(path: Path) -> set[str]:
    """Every qualified name a module defines: functions, classes and their methods, module-level names."""
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign) and not prefix:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        names.add(target.id)

    walk(ast.parse(path.read_text()).body, "")
    return names


def test_every_cited_function_exists() -> None:
    cited = REFERENCE.findall(DOC.read_text())
    assert len(cited) > 50, "the page cites its hops as `path.py:name`"
    missing = [f"{path}:{name}" for path, name in sorted(set(cited))
               if not (REPO / path).is_file() or name not in _defined(REPO / path)]
    assert missing == []


def test_the_layer_table_is_the_enforced_one() -> None:
    section = DOC.read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = {int(n): set(re.findall(r"`(\w+)`", cells)) for n, cells in LAYER_ROW.findall(section)}
    enforced = {i: set(names) - {""} for i, names in enumerate(LAYERS)}
    assert rows == enforced, "docs/architecture.md's layer table (and its package list) must follow LAYERS: " + "; ".join(
        f"layer {i}: add {sorted(enforced[i] - rows.get(i, set()))}, drop {sorted(rows.get(i, set()) - enforced[i])}"
        for i in sorted(set(rows) | set(enforced)) if rows.get(i) != enforced.get(i))
