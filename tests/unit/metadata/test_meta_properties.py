"""meta.properties v1 and the checks a KRaft node makes of its directories before it starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.metadata import meta_properties as mp
from gregor.metadata.store import MetadataError


def test_random_uuid_is_kafka_text_form() -> None:
    for _ in range(200):
        u = mp.random_uuid()
        assert mp.parse_uuid(u) == u and not u.startswith("-") and len(u) == 22


@pytest.mark.parametrize("bad", ["abc", "A" * 22 + "=", "AAAAAAAAAAAAAAAAAAAAAA", "!" * 22, "AAAAAAAAAAAAAAAAAAAAAB"])
def test_bad_cluster_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        mp.parse_uuid(bad)


def test_format_then_check(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a")]
    cid = mp.random_uuid()
    assert mp.format_directories(dirs, cid, 3) == [str(tmp_path / "a"), str(tmp_path / "b")]
    text = (tmp_path / "a" / "meta.properties").read_text()
    assert "version=1" in text and f"cluster.id={cid}" in text and "node.id=3" in text and "directory.id=" in text
    a, b = mp.read(str(tmp_path / "a")), mp.read(str(tmp_path / "b"))
    assert a is not None and b is not None and a.directory_id != b.directory_id
    assert mp.check_formatted(dirs, 3) == cid
    with pytest.raises(MetadataError, match="already formatted"):
        mp.format_directories(dirs, cid, 3)
    assert mp.format_directories(dirs + [str(tmp_path / "c")], cid, 3, ignore_formatted=True) == [str(tmp_path / "c")]
    with pytest.raises(MetadataError, match="formatted for cluster"):
        mp.format_directories(dirs, mp.random_uuid(), 3, ignore_formatted=True)


def test_check_refuses_unformatted_foreign_and_other_node_dirs(tmp_path: Path) -> None:
    cid = mp.random_uuid()
    mp.format_directories([str(tmp_path / "a")], cid, 1)
    with pytest.raises(mp.NotFormattedError, match="No meta.properties found in .*/b .*gregor storage format"):
        mp.check_formatted([str(tmp_path / "a"), str(tmp_path / "b")], 1)
    mp.format_directories([str(tmp_path / "b")], mp.random_uuid(), 1)
    with pytest.raises(mp.NotFormattedError, match="Invalid cluster.id in: .*/b/meta.properties. Expected"):
        mp.check_formatted([str(tmp_path / "a"), str(tmp_path / "b")], 1)
    with pytest.raises(mp.NotFormattedError, match="Stored node id 1 doesn't match the configured node.id 2"):
        mp.check_formatted([str(tmp_path / "a")], 2)


def test_version_0_is_not_a_kraft_directory(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=x\n")
    with pytest.raises(MetadataError, match="version 0"):
        mp.read(str(tmp_path))
