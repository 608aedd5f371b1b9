"""Run the real `gregor` command in a child process, as a user at a terminal would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """This checkout's package first on the path, in the child as in the tests."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gregor", *args]


def gregor(*args: str, stdin: str | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), input=stdin, capture_output=True, text=True, timeout=timeout_s, env=env())


def popen(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env())


def one_line(text: str) -> str:
    """The only line of `text`; fails the test if there are more (or none)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{text}"
    assert "Traceback" not in text
    return lines[0]
