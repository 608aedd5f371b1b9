"""The replica fetchers' side of a fetch session (gregor.client.fetch_session), without a broker."""

from __future__ import annotations

from typing import Any

from gregor.client.fetch_session import FetchSessionHandler
from gregor.protocol.errors import ErrorCode


def _want(**offsets: int) -> dict[tuple[str, int], dict[str, Any]]:
    out = {}
    for name, off in offsets.items():
        topic, p = name.rsplit("_", 1)
        out[(topic, int(p))] = {"partition": int(p), "current_leader_epoch": 3, "fetch_offset": off,
                                "last_fetched_epoch": 2, "log_start_offset": 0, "partition_max_bytes": 100}
    return out


def _named(topics: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(t["topic"], p["partition"]) for t in topics for p in t["partitions"]]


def test_full_then_incremental_then_forgotten() -> None:
    h = FetchSessionHandler()
    sid, epoch, topics, forgotten = h.build(_want(a_0=0, a_1=0, b_0=5))
    assert (sid, epoch, forgotten) == (0, 0, []) and _named(topics) == [("a", 0), ("a", 1), ("b", 0)]
    assert h.answered(ErrorCode.NONE, 77)
    assert (h.session_id, h.epoch) == (77, 1)
    # Nothing moved: an incremental fetch naming nothing.
    assert h.build(_want(a_0=0, a_1=0, b_0=5)) == (77, 1, [], [])
    assert h.answered(ErrorCode.NONE, 77) and h.epoch == 2
    # a-1 moved, b-0's leader epoch changed, a-0 left, c-0 joined.
    want = _want(a_1=4, b_0=5, c_0=0)
    want[("b", 0)]["current_leader_epoch"] = 4
    sid, epoch, topics, forgotten = h.build(want)
    assert (sid, epoch) == (77, 2)
    assert _named(topics) == [("a", 1), ("b", 0), ("c", 0)]
    assert forgotten == [{"topic": "a", "partitions": [0]}]
    assert h.answered(ErrorCode.NONE, 77)
    assert h.build(want) == (77, 3, [], [])


def test_a_session_error_or_a_lost_request_resets_to_a_full_fetch() -> None:
    h = FetchSessionHandler()
    h.build(_want(a_0=0))
    h.answered(ErrorCode.NONE, 9)
    h.build(_want(a_0=1))
    assert not h.answered(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    assert h.build(_want(a_0=1))[:2] == (0, 0)
    h.answered(ErrorCode.NONE, 10)
    h.build(_want(a_0=2))
    h.reset()  # the connection failed with the request in flight
    sid, epoch, topics, _ = h.build(_want(a_0=2))
    assert (sid, epoch) == (0, 0) and _named(topics) == [("a", 0)]
    assert h.full_fetches == 3


def test_a_sessionless_answer_keeps_fetching_in_full() -> None:
    h = FetchSessionHandler()
    h.build(_want(a_0=0))
    assert h.answered(ErrorCode.NONE, 0)  # the broker's cache had no room
    sid, epoch, topics, _ = h.build(_want(a_0=0))
    assert (sid, epoch) == (0, 0) and _named(topics) == [("a", 0)]
