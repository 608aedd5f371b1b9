"""What every client test produces and how it checks what comes back."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@dataclass
class Msg:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def make_messages(n: int, seed: int, text: bool = False) -> list[Msg]:
    """Keyed messages with headers; binary payloads unless `text` (for kcat's text output)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        if text:
            value = f"value-{i}-" + "".join(rnd.choice("abcdefghij") for _ in range(rnd.randint(0, 300)))
            v: bytes | None = value.encode()
        else:
            v = rnd.randbytes(rnd.randint(0, 2000)) if i % 17 else None if i % 34 == 0 else b""
        key = f"key-{rnd.randint(0, 50)}".encode()
        headers = [(f"h{j}", f"hv-{i}-{j}".encode()) for j in range(i % 3)]
        out.append(Msg(key, v, headers))
    return out


def by_partition(items: list[tuple[int, int, Msg]]) -> dict[int, list[tuple[int, Msg]]]:
    """(partition, offset, msg) -> partition -> [(offset, msg)] sorted by offset."""
    parts: dict[int, list[tuple[int, Msg]]] = defaultdict(list)
    for p, off, m in items:
        parts[p].append((off, m))
    return {p: sorted(v, key=lambda x: x[0]) for p, v in parts.items()}


def assert_same(produced: list[tuple[int, int, Msg]], consumed: list[tuple[int, int, Msg]]) -> None:
    """Byte for byte, in order per partition, offsets included."""
    a, b = by_partition(produced), by_partition(consumed)
    assert sorted(a) == sorted(b)
    for p in a:
        assert len(a[p]) == len(b[p]), f"partition {p}: produced {len(a[p])}, consumed {len(b[p])}"
        for (oa, ma), (ob, mb) in zip(a[p], b[p], strict=False):
            assert oa == ob
            assert ma.key == mb.key, f"p{p}@{oa}: key"
            assert ma.value == mb.value, f"p{p}@{oa}: value"
            assert ma.headers == mb.headers, f"p{p}@{oa}: headers"
        offsets = [o for o, _ in b[p]]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "offsets are contiguous"
