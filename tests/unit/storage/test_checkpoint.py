from __future__ import annotations

import os

import pytest

from gregor.storage.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from gregor.storage.errors import CorruptCheckpointError


def test_offset_checkpoint_round_trip(tmp_path) -> None:
    f = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    assert f.read() == {}
    offsets = {("a.b_c-d", 0): 5, ("a.b_c-d", 12): 0, ("t", 3): 2**62}
    f.write(offsets)
    assert f.read() == offsets
    text = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "3"]
    assert "a.b_c-d 12 0" in text.splitlines()
    assert not os.path.exists(f.path + ".tmp")
    f.write({})
    assert f.read() == {}


def test_leader_epoch_checkpoint_round_trip(tmp_path) -> None:
    f = LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint"))
    f.write([(0, 0), (3, 100)])
    assert f.read() == [(0, 0), (3, 100)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 100\n"


@pytest.mark.parametrize(
    "text",
    ["", "1\n0\n", "0\n2\nt 0 1\n", "0\nx\n", "0\n1\nt 0\n", "0\n1\nt zero 1\n"],
)
def test_corrupt_offset_checkpoint(tmp_path, text: str) -> None:
    p = tmp_path / "cp"
    p.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(str(p)).read()
