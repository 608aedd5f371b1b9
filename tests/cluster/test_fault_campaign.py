"""The fault campaign script, short: a few rounds of kills and freezes under idempotent acks=all load,
nothing lost, duplicated or reordered (scripts/fault_campaign.py; the full run is --leader-kills 100)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_fault_campaign(zk_connect: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fault_campaign.py"), "--rounds", "4", "--seed", "3",
                        "--duration", "45", "--rate", "1000", "--zk-connect", zk_connect, "--dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "RESULT: OK" in r.stdout and "lost: 0, duplicated: 0, out of order: 0" in r.stdout
    assert "rounds: 0" not in r.stdout


def test_short_fault_campaign_on_a_kraft_quorum(tmp_path: Path) -> None:
    """The KRaft faults: the active controller frozen past the fetch timeout, the quorum's majority lost (a
    metadata change refused meanwhile) and regained, the active controller cut off from the quorum by a
    network partition (a new one elected on the majority's side); nothing acknowledged lost, one active
    controller an epoch."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fault_campaign.py"), "--kraft", "--rounds", "3",
                        "--faults", "freeze-controller,lose-majority,isolate-controller", "--seed", "3",
                        "--rate", "500",
                        "--dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "RESULT: OK" in r.stdout and "lost: 0, duplicated: 0, out of order: 0" in r.stdout
    assert "rounds: 3 (freeze-controller 1, lose-majority 1, isolate-controller 1)" in r.stdout, r.stdout
    assert "isolate-controller: the majority elected a new controller" in r.stdout
    assert "lose-majority: CreateTopics refused after" in r.stdout and "quorum" in r.stdout
    assert "active controllers:" in r.stdout and "one each" in r.stdout
