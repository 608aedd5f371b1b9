"""Structure-aware inputs for fuzzing the broker: valid requests of every API, then mutated.

Sans-IO, like gregor.protocol: `InputMaker.make(index)` returns one `FuzzInput` (the bytes of a
whole size-prefixed request and what is known about it) and nothing here touches a socket, so
the benchmark (benchmarks/fuzz_broker.py), the CI test and a replay all build the same bytes.

How an input is made (everything drawn from `random.Random(f"{seed}:{index}")`, so input I of
seed S is the same bytes on every run and on every machine):
1. A valid request body for one advertised API at one supported version, built by walking that
   API's schema (gregor.protocol.schema) and choosing values by field name (topics from a small
   pool, partitions 0..2, record batches from gregor.protocol.records.build_batch, ...).
2. Mostly, mutations: structural ones on the value tree (integers at their type's boundaries,
   strings empty/huge/non-UTF-8/internal topic names, null where the field is not nullable,
   arrays empty/null/duplicated/lying about their count, unknown tagged fields, record batches
   with lying counts and lengths, CRC-fixed garbage, bad or bomb compressed payloads), then,
   sometimes, byte-level ones on the encoded body (bit flips, truncation, splices, boundary
   values written over length fields) and on the request header (version, API key, client id).
The body is encoded by this module's own encoder, which mirrors Schema.encode (tests check that
it gives the same bytes for valid trees) but lets a mutation write what the codec never would.

Bounds that keep a long run's disk and file descriptors small: topics come from a pool of a few
names, CreateTopics/CreatePartitions counts stay small even when mutated (`MAX_PARTITIONS`; a
byte-level mutation that makes one big is dropped for the structural input, because a broker busy
creating 9,000 partitions on its event loop, issue 8 findings 2 and 9, hides everything else), and
fields that make the broker wait on purpose (Fetch max_wait_ms, group timeouts) are not mutated
to large values: a Fetch that asks to wait 24 days is served as asked, that is no hang.
"""

from __future__ import annotations

import random
import struct
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import apis, compression
from gregor.protocol.primitives import Writer
from gregor.protocol.records import Header, Record, build_batch, compute_crc
from gregor.protocol.schema import Api, Array, Field, StructType, Type

# --- pools and bounds -------------------------------------------------------------------

CANARY_TOPIC = "fuzz-canary"  # written before fuzzing, never named by inputs, checked after restart
POOL_TOPICS = ["fz-0", "fz-1", "fz-2", "fz-compact", "fz-zstd"]
INTERNAL_TOPICS = ["__consumer_offsets", "__transaction_state"]
GROUPS = ["g-0", "g-1", "g-2"]
TXN_IDS = ["tx-0", "tx-1"]
MAX_PARTITIONS = 3  # per pool topic: what CreateTopics / CreatePartitions inputs may ask for
HUGE_STRING_BYTES = 40_000
MAX_INPUT_BYTES = 1 << 20
TIMING_FIELDS = {"max_wait_ms", "rebalance_timeout_ms", "session_timeout_ms", "timeout_ms",
                 "transaction_timeout_ms"}
#: Inputs whose decoded timing fields exceed this may park on purpose (a Fetch waiting its max_wait_ms).
PARK_LIMIT_MS = 2_000

INT_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
              "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
              "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1)}

TOPIC_CONFIGS: dict[str, list[str]] = {
    "cleanup.policy": ["delete", "compact", "compact,delete"],
    "retention.ms": ["60000", "-1", "3600000"],
    "retention.bytes": ["1048576", "-1"],
    "segment.bytes": ["1048576", "16777216"],
    "max.message.bytes": ["100000", "1048588"],
    "compression.type": ["producer", "zstd", "gzip", "lz4", "snappy", "uncompressed"],
    "message.timestamp.type": ["CreateTime", "LogAppendTime"],
    "min.insync.replicas": ["1"],
    "segment.index.bytes": ["10485760", "4096"],
    "flush.messages": ["9223372036854775807", "1000"],
    "min.cleanable.dirty.ratio": ["0.5", "0.1"],
}
BROKER_CONFIG_KEYS = ["log.retention.ms", "num.partitions", "message.max.bytes", "log.cleaner.threads"]
# Config values that parse as numbers at the edges: what finding 3 of issue 8 was made of.
NUMERIC_EDGE_STRINGS = ["0", "-1", "1", "8", "2147483647", "2147483648", "-2147483648", "9223372036854775807",
                        "9223372036854775808", "-9223372036854775808", "1e308", "NaN", "0.0", "-0.5", ""]


@dataclass
class Options:
    """Which known-dangerous classes of input to generate (see KNOWN_CLASSES)."""

    internal_topics: bool = True  # name __consumer_offsets & co. in every API (issue 8 finding 1)
    config_edges: bool = True  # numeric edge values for topic configs (finding 3)
    bombs: bool = True  # compressed batches that expand to BOMB_BYTES (finding 5)
    lying_batches: bool = True  # CRC-fixed batches whose counts/lengths lie (findings 4, 10)
    bomb_bytes: int = 16 << 20

    @staticmethod
    def safe() -> Options:
        return Options(internal_topics=False, config_edges=False, bombs=False, lying_batches=False)


# --- values the encoder writes verbatim -------------------------------------------------

@dataclass
class Raw:
    """Bytes written in place of a field's whole encoding (length prefix included)."""

    data: bytes


@dataclass
class BadStr:
    """A string or bytes field whose content is these bytes (non-UTF-8 allowed), honestly prefixed."""

    data: bytes


@dataclass
class LieLen:
    """A string, bytes or array field whose length prefix says `declared` but whose content is `value`."""

    value: Any
    declared: int


@dataclass
class Tagged:
    """Unknown tagged fields appended to a struct's tag section: (tag, payload) pairs."""

    extra: list[tuple[int, bytes]]


# --- encoder: Schema.encode, plus the lies above ----------------------------------------

def _fields_for(fields: list[Field], version: int, flexible: bool) -> tuple[list[Field], list[Field]]:
    plain, tagged = [], []
    for fd in fields:
        is_tagged = flexible and version in fd.tagged and fd.tag is not None
        if is_tagged:
            tagged.append(fd)
        elif version in fd.versions:
            plain.append(fd)
    tagged.sort(key=lambda x: x.tag)  # type: ignore[arg-type, return-value]
    return plain, tagged


def _length(w: Writer, n: int, flexible: bool, short: bool = False) -> None:
    if flexible:
        w.unsigned_varint(max(n + 1, 0) & 0xFFFFFFFF)
    elif short:
        w.int16(max(min(n, (1 << 15) - 1), -(1 << 15)))
    else:
        w.int32(max(min(n, (1 << 31) - 1), -(1 << 31)))


def encode_value(w: Writer, t: Type, v: Any, version: int, flexible: bool, nullable: bool) -> None:
    if isinstance(v, Raw):
        w.raw(v.data)
        return
    if isinstance(t, Array):
        if isinstance(v, LieLen):
            _length(w, v.declared, flexible)
            items = v.value or []
        elif v is None:
            _length(w, -1, flexible)
            return
        else:
            _length(w, len(v), flexible)
            items = v
        for x in items:
            encode_value(w, t.item, x, version, flexible, False)
        return
    if isinstance(t, StructType):
        if nullable and flexible:
            if v is None:
                w.int8(-1)
                return
            w.int8(1)
        encode_struct(w, t.fields, v, version, flexible)
        return
    name = t.name
    if name in ("string", "bytes", "records"):
        short = name == "string"
        if isinstance(v, LieLen):
            data = v.value.encode() if isinstance(v.value, str) else bytes(v.value)
            _length(w, v.declared, flexible, short)
            w.raw(data)
            return
        if v is None:
            _length(w, -1, flexible, short)
            return
        data = v.data if isinstance(v, BadStr) else (v.encode() if isinstance(v, str) else bytes(v))
        _length(w, len(data), flexible, short)
        w.raw(data)
        return
    if name == "uuid":
        w.uuid(v if v is not None else uuid.UUID(int=0))
        return
    if name == "bool":
        w.raw(bytes([(v if isinstance(v, int) and not isinstance(v, bool) else int(bool(v))) & 0xFF]))
        return
    if name == "float64":
        w.float64(float(v))
        return
    lo, hi = INT_RANGES[name]
    getattr(w, name)(max(lo, min(hi, int(v))))


def encode_struct(w: Writer, fields: list[Field], obj: dict[str, Any], version: int, flexible: bool) -> None:
    plain, tagged = _fields_for(fields, version, flexible)
    for fd in plain:
        v = obj.get(fd.name, fd.default_value()) if isinstance(obj, dict) else fd.default_value()
        encode_value(w, fd.type, v, version, flexible, version in fd.nullable)
    if not flexible:
        return
    present: list[tuple[int, bytes]] = []
    for fd in tagged:
        v = obj.get(fd.name) if isinstance(obj, dict) else None
        if v is None or (not isinstance(v, (Raw, LieLen, BadStr)) and v == fd.default_value()):
            continue
        sub = Writer()
        encode_value(sub, fd.type, v, version, flexible, version in fd.nullable)
        present.append((fd.tag, sub.getvalue()))  # type: ignore[arg-type]
    extra = obj.get("__tags__") if isinstance(obj, dict) else None
    if isinstance(extra, Tagged):
        present += extra.extra
    w.unsigned_varint(len(present))
    for tag, data in present:
        w.unsigned_varint(tag & 0xFFFFFFFF)
        w.unsigned_varint(len(data))
        w.raw(data)


def encode_request(api: Api, version: int, correlation_id: int, client_id: Any, body: dict[str, Any]) -> bytes:
    """A size-prefixed request (header v1/v2 by the API's own rule) from a possibly lying tree."""
    w = Writer()
    w.int16(api.key)
    w.int16(version)
    w.int32(correlation_id)
    encode_value(w, _STRING, client_id, version, False, True)
    if api.request_header_version(version) >= 2:
        w.unsigned_varint(0)
    encode_struct(w, api.request.fields, body, version, version >= api.flexible_from)
    data = w.getvalue()
    return struct.pack(">i", len(data)) + data


class _StringType(Type):
    name = "string"


_STRING = _StringType()


# --- record batches ---------------------------------------------------------------------

_CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
_BOMBS: dict[tuple[int, int], bytes] = {}


def _bomb_payload(codec: int, size: int) -> bytes:
    """`size` bytes of one record's worth of zeros, compressed: small on the wire, big when opened."""
    key = (codec, size)
    if key not in _BOMBS:
        _BOMBS[key] = compression.compress(codec, b"\0" * size)
    return _BOMBS[key]


def _refresh_crc(b: bytearray) -> bytearray:
    if len(b) >= 61:
        struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    return b


def _varint(v: int) -> bytes:
    w = Writer()
    w.varint(v)
    return w.getvalue()


def valid_batch(rng: random.Random, *, keys: bool = True, codec: int | None = None) -> bytes:
    n = rng.choice([1, 1, 2, 3, 10])
    ts = 1_700_000_000_000 + rng.randrange(10**6)
    recs = []
    for i in range(n):
        key = (b"k%d" % rng.randrange(20)) if keys or rng.random() < 0.5 else None
        value = None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 5, 20, 100]))
        headers = [Header("h", b"v")] if rng.random() < 0.2 else []
        recs.append(Record(i, ts + i, key, value, headers))
    if codec is None:
        codec = rng.choice([compression.NONE] * 4 + _CODECS)
    return build_batch(recs, codec=codec)


def internal_batch(rng: random.Random) -> bytes:
    """A batch as a client forging __consumer_offsets records would write it: real offset-commit and
    group keys (gregor.coordinator.group.records) with values that are valid, cut short, garbage or null."""
    from gregor.coordinator.group import records as group_records

    recs = []
    ts = 1_700_000_000_000
    for i in range(rng.choice([1, 2, 3])):
        group = rng.choice(GROUPS)
        if rng.random() < 0.6:
            key = group_records.offset_key(group, rng.choice(POOL_TOPICS), rng.choice([0, 1, -1]))
            value: bytes | None = group_records.offset_value(rng.choice([0, 5, -1, (1 << 63) - 1]), -1, "", ts)
        else:
            key = group_records.group_key(group)
            value = rng.randbytes(rng.randrange(0, 40))
        c = rng.random()
        if c < 0.25 and value:
            value = value[: rng.randrange(len(value))]
        elif c < 0.4:
            value = rng.randbytes(rng.randrange(0, 40))
        elif c < 0.5:
            value = None
        elif c < 0.6:
            key = key[: rng.randrange(len(key))]
        elif c < 0.7:
            key = struct.pack(">h", rng.choice([0, 1, 2, 3, -1, 32767])) + key[2:]
        recs.append(Record(i, ts + i, key, value))
    return build_batch(recs)


def mutate_batch(rng: random.Random, batch: bytes, opts: Options) -> tuple[bytes, str]:
    """One structural corruption of a record batch; returns the bytes and a short label."""
    b = bytearray(batch) if len(batch) >= 61 else bytearray(valid_batch(rng))
    kinds = ["bitflip", "truncate", "magic", "attrs", "timestamps", "producer", "base_offset", "batch_length",
             "two_batches", "garbage_nocrc", "empty", "control"]
    if opts.lying_batches:
        kinds += ["count_lie", "delta_lie", "record_len_lie", "crc_garbage", "bad_frame", "codec_swap",
                  "record_varints"] * 2
    if opts.bombs:
        kinds.append("bomb")
    kind = rng.choice(kinds)
    if kind == "bitflip":
        for _ in range(rng.randint(1, 4)):
            p = rng.randrange(len(b))
            b[p] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[: rng.randrange(len(b))]
    elif kind == "magic":
        b[16] = rng.choice([0, 1, 3, 255])
        if rng.random() < 0.5:
            _refresh_crc(b)
    elif kind == "attrs":
        struct.pack_into(">h", b, 21, rng.choice([0x07, 0x05, 0x06, 0x08, 0x10, 0x20, 0x30, 0x40, -1, 0x7FFF]))
        _refresh_crc(b)
    elif kind == "timestamps":
        lo, hi = INT_RANGES["int64"]
        struct.pack_into(">qq", b, 27, rng.choice([lo, hi, -1, 0]), rng.choice([lo, hi, -1, 0]))
        _refresh_crc(b)
    elif kind == "producer":
        struct.pack_into(">qhi", b, 43, rng.choice([-1, 0, 1, 1 << 62]), rng.choice([-1, 0, 32767]),
                         rng.choice([-1, 0, (1 << 31) - 1]))
        _refresh_crc(b)
    elif kind == "base_offset":
        struct.pack_into(">qi", b, 0, rng.choice([-1, 1 << 62, (1 << 63) - 1]), rng.choice([-1, 0, (1 << 31) - 1]))
    elif kind == "batch_length":
        struct.pack_into(">i", b, 8, rng.choice([0, -1, 48, 49, len(b) - 11, len(b) - 13, (1 << 31) - 1]))
    elif kind == "two_batches":
        other = bytearray(valid_batch(rng))
        b = b + other if rng.random() < 0.7 else b + other[: rng.randrange(1, len(other))]
    elif kind == "garbage_nocrc":
        b = b[:61] + bytearray(rng.randbytes(rng.randrange(1, 200)))
    elif kind == "empty":
        b = bytearray()
    elif kind == "control":
        struct.pack_into(">h", b, 21, 0x30)
        _refresh_crc(b)
    elif kind == "count_lie":
        struct.pack_into(">i", b, 57, rng.choice([0, -1, 2, 1000, (1 << 31) - 1, -(1 << 31)]))
        _refresh_crc(b)
    elif kind == "delta_lie":
        struct.pack_into(">i", b, 23, rng.choice([-1, 5, (1 << 31) - 1, -(1 << 31)]))
        _refresh_crc(b)
    elif kind == "record_len_lie":
        if b[22] & 7 == 0 and len(b) > 61:
            b = b[:61] + bytearray(_varint(rng.choice([-1, 0, 1 << 20, (1 << 31) - 1]))) + b[62:]
            struct.pack_into(">i", b, 8, len(b) - 12)
            _refresh_crc(b)
    elif kind == "crc_garbage":
        b = b[:61] + bytearray(rng.randbytes(rng.randrange(0, 300)))
        struct.pack_into(">i", b, 8, len(b) - 12)
        _refresh_crc(b)
    elif kind == "bad_frame":
        codec = rng.choice(_CODECS)
        good = compression.compress(codec, bytes(b[61:]))
        bad = bytearray(good)
        if rng.random() < 0.5 and len(bad) > 4:
            bad = bad[: rng.randrange(1, len(bad))]
        else:
            for _ in range(rng.randint(1, 8)):
                p = rng.randrange(len(bad))
                bad[p] ^= 1 << rng.randrange(8)
        b = b[:61] + bad
        struct.pack_into(">h", b, 21, (struct.unpack_from(">h", b, 21)[0] & ~7) | codec)
        struct.pack_into(">i", b, 8, len(b) - 12)
        _refresh_crc(b)
    elif kind == "codec_swap":
        struct.pack_into(">h", b, 21, (struct.unpack_from(">h", b, 21)[0] & ~7) | rng.choice(_CODECS + [5, 6, 7]))
        _refresh_crc(b)
    elif kind == "record_varints":
        b = bytearray(_lying_records_batch(rng))
    elif kind == "bomb":
        codec = rng.choice(_CODECS)
        payload = _bomb_payload(codec, opts.bomb_bytes)
        b = b[:61] + bytearray(payload)
        struct.pack_into(">h", b, 21, codec)
        struct.pack_into(">i", b, 57, 1)
        struct.pack_into(">i", b, 23, 0)
        struct.pack_into(">i", b, 8, len(b) - 12)
        _refresh_crc(b)
    return bytes(b), kind


def _lying_records_batch(rng: random.Random) -> bytes:
    """One record whose inner varints lie (lengths, deltas, header counts), in an honest CRC'd batch."""
    edge = rng.choice([-2, -1, 0, 1 << 20, (1 << 31) - 1, -(1 << 31)])
    parts = {"attrs": b"\0", "ts": _varint(0), "off": _varint(0), "key": _varint(1) + b"k", "value": _varint(1) + b"v",
             "hcount": _varint(0)}
    which = rng.choice(["ts", "off", "key", "value", "hcount", "hkey"])
    if which in ("key", "value"):
        parts[which] = _varint(edge) + (b"x" if edge > 0 else b"")
    elif which == "hkey":
        parts["hcount"] = _varint(1) + _varint(rng.choice([-1, 0, 100])) + b"h" + _varint(-1)
    else:
        parts[which] = _varint(edge)
    rec = b"".join(parts.values())
    body = _varint(len(rec)) + rec
    codec = rng.choice([compression.NONE, compression.NONE, compression.ZSTD, compression.GZIP])
    payload = compression.compress(codec, body) if codec else body
    out = bytearray(struct.pack(">qiibIhiqqqhii", 0, 49 + len(payload), -1, 2, 0, codec, 0, 1_700_000_000_000,
                                1_700_000_000_000, -1, -1, -1, 1))
    out += payload
    return bytes(_refresh_crc(out))


# --- the input ----------------------------------------------------------------------------

@dataclass
class FuzzInput:
    index: int
    data: bytes  # the whole size-prefixed request as sent
    api_key: int
    version: int
    kind: str  # valid / structural / bytes / header / frame_lie, with mutation labels
    may_park: bool = False  # the broker may legitimately hold its answer (a long Fetch wait)
    standalone: bool = False  # sent on its own connection (its frame size lies)
    labels: list[str] = field(default_factory=list)

    def describe(self) -> str:
        name = apis.BY_KEY[self.api_key].name if self.api_key in apis.BY_KEY else f"api{self.api_key}"
        return f"#{self.index} {name} v{self.version} {self.kind} [{', '.join(self.labels)}] {len(self.data)} B"


@dataclass
class _Slot:
    """A place in the value tree a mutation may change."""

    parent: Any  # dict or list
    key: Any
    fd: Field | None
    t: Type
    path: str


class InputMaker:
    """Makes input `index` of `seed` for a broker advertising `versions` ({api key: (min, max)})."""

    def __init__(self, seed: int, versions: dict[int, tuple[int, int]], opts: Options | None = None) -> None:
        self.seed = seed
        self.opts = opts or Options()
        self.versions = {k: v for k, v in sorted(versions.items()) if k in apis.BY_KEY}
        self.keys = list(self.versions)
        self.topics = POOL_TOPICS + (INTERNAL_TOPICS if self.opts.internal_topics else [])
        self._grown = False
        self._last_topic = ""

    # --- entry point ------------------------------------------------------------------
    def make(self, index: int) -> FuzzInput:
        rng = random.Random(f"{self.seed}:{index}")
        key = rng.choice(self.keys)
        api = apis.BY_KEY[key]
        lo, hi = self.versions[key]
        version = rng.randint(max(lo, api.min_version), min(hi, api.max_version))
        flexible = version >= api.flexible_from
        slots: list[_Slot] = []
        body = self._struct(rng, api.request.fields, version, flexible, api.name, slots)
        labels: list[str] = []
        self._grown = False
        self._last_topic = ""
        roll = rng.random()
        kind = "valid"
        client_id: Any = "fuzz"
        if roll >= 0.12:
            kind = "structural"
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                if slots:
                    labels.append(self._mutate_slot(rng, rng.choice(slots), version, flexible))
            if rng.random() < 0.05:
                body["__tags__"] = Tagged([(rng.choice([0, 1, 7, 1000, (1 << 31)]), rng.randbytes(rng.randrange(0, 20)))
                                           for _ in range(rng.randint(1, 3))])
                labels.append("unknown_tags")
        cid = rng.randrange(1, 1 << 24)
        if rng.random() < 0.04:
            client_id = rng.choice([None, "", BadStr(b"\xff\xfe\xc0"), "c" * 30000, LieLen("abc", 1000)])
            labels.append("client_id")
        data = encode_request(api, version, cid, client_id, body)
        if len(data) > MAX_INPUT_BYTES:  # nested growth multiplied: keep inputs (and the run's memory) small
            data = encode_request(api, version, cid, client_id, self._struct(rng, api.request.fields, version,
                                                                           flexible, api.name, []))
            labels.append("too_big_regenerated")
        fi = FuzzInput(index, data, key, version, kind, labels=labels)
        roll2 = rng.random()
        if roll2 < 0.22:
            fi.data = self._mutate_bytes(rng, data, labels)
            fi.kind = "bytes" if kind == "valid" else kind + "+bytes"
        elif roll2 < 0.28:
            fi.data = self._mutate_header(rng, data, api, labels)
            fi.kind = "header"
            if len(fi.data) >= 8:
                fi.api_key, fi.version = struct.unpack_from(">hh", fi.data, 4)
        elif roll2 < 0.29:
            fi.data = self._frame_lie(rng, data, labels)
            fi.kind = "frame_lie"
            fi.standalone = True
        if fi.kind != "valid" and self._too_many_partitions(fi):
            # a bit flip made a partition count big: bounded disk and fds matter more than that input
            fi.data, fi.kind, fi.standalone = data, kind, False
            fi.api_key, fi.version = key, version
            labels.append("partition_guard")
            if self._too_many_partitions(fi):
                fi.data = encode_request(api, version, cid, "fuzz", self._struct(rng, api.request.fields, version,
                                                                                 flexible, api.name, []))
        fi.may_park = self._may_park(fi)
        return fi

    # --- valid values -------------------------------------------------------------------
    def _struct(self, rng: random.Random, fields: list[Field], version: int, flexible: bool, path: str,
                slots: list[_Slot]) -> dict[str, Any]:
        plain, tagged = _fields_for(fields, version, flexible)
        out: dict[str, Any] = {}
        for fd in plain + [t for t in tagged if rng.random() < 0.5]:
            p = f"{path}.{fd.name}"
            out[fd.name] = self._value(rng, fd, fd.type, version, flexible, p, slots, out)
            slots.append(_Slot(out, fd.name, fd, fd.type, p))
        return out

    def _value(self, rng: random.Random, fd: Field, t: Type, version: int, flexible: bool, path: str,
               slots: list[_Slot], siblings: dict[str, Any]) -> Any:
        name = fd.name
        if isinstance(t, Array):
            n = rng.choice([1, 1, 1, 2, 3]) if not name.endswith("forgotten_topics_data") else rng.choice([0, 0, 1])
            if name in ("assignments",) and "CreateTopics" in path:
                return []  # broker-chosen placement; mutations may add some
            if name == "broker_ids":
                return [0]
            items = []
            for i in range(n):
                if isinstance(t.item, StructType):
                    items.append(self._struct(rng, t.item.fields, version, flexible, f"{path}[{i}]", slots))
                else:
                    items.append(self._scalar(rng, name, t.item, path))
            for i in range(len(items)):
                slots.append(_Slot(items, i, None, t.item, f"{path}[{i}]"))
            return items
        if isinstance(t, StructType):
            return self._struct(rng, t.fields, version, flexible, path, slots)
        return self._scalar(rng, name, t, path, siblings)

    def _scalar(self, rng: random.Random, name: str, t: Type, path: str, siblings: dict[str, Any] | None = None) -> Any:
        tn = t.name
        api = path.split(".", 1)[0]
        if tn == "records":
            if self._last_topic in INTERNAL_TOPICS:
                return internal_batch(rng)
            return valid_batch(rng, keys=True, codec=compression.NONE if rng.random() < 0.5 else None)
        if tn == "uuid":
            return uuid.UUID(int=0) if rng.random() < 0.8 else uuid.UUID(int=rng.getrandbits(128))
        if tn == "bool":
            return rng.random() < 0.5
        if tn in ("bytes",):
            return rng.randbytes(rng.choice([0, 4, 16]))
        if tn == "float64":
            return rng.random()
        if tn == "string" or tn.startswith("[]string"):
            return self._string(rng, name, api, path)
        return self._int(rng, name, tn, api)

    def _topic(self, rng: random.Random) -> str:
        self._last_topic = rng.choice(self.topics)  # a Produce's records are built after their topic's name
        return self._last_topic

    def _string(self, rng: random.Random, name: str, api: str, path: str) -> str | None:
        if name in ("name", "topic", "topic_name", "topic_names", "resource_name", "subscribed_topic_names"):
            if name == "name" and "configs" in path:
                return rng.choice(list(TOPIC_CONFIGS) + BROKER_CONFIG_KEYS + ["no.such.config"])
            if name == "resource_name" and rng.random() < 0.3:
                return rng.choice(["0", "", "1"])  # a broker resource
            return self._topic(rng)
        if name == "value":
            return rng.choice(rng.choice(list(TOPIC_CONFIGS.values())))
        if name in ("group_id", "groups", "groups_names", "group_ids", "key", "coordinator_keys"):
            return rng.choice(GROUPS + TXN_IDS)
        if "transactional_id" in name:
            return None if rng.random() < 0.5 else rng.choice(TXN_IDS)
        if name in ("member_id", "group_instance_id", "instance_id"):
            return rng.choice(["", "m-1", None]) if name != "member_id" else rng.choice(["", "m-1"])
        if name in ("protocol_type",):
            return "consumer"
        if name in ("protocol_name", "server_assignor"):
            return rng.choice(["range", "roundrobin", "uniform", None])
        if name in ("states_filter",):
            return rng.choice(["Stable", "Empty", "PreparingRebalance"])
        if name in ("types_filter",):
            return rng.choice(["classic", "consumer"])
        if name in ("configuration_keys",):
            return rng.choice(list(TOPIC_CONFIGS))
        if name == "subscribed_topic_regex":
            return rng.choice([None, "fz-.*"])
        if name in ("client_software_name", "client_software_version"):
            return rng.choice(["fuzz", "1.0"])
        return rng.choice(["", "x", "fuzz"])

    def _int(self, rng: random.Random, name: str, tn: str, api: str) -> int:
        if name in ("index", "partition", "partition_index", "partitions", "partition_indexes"):
            return rng.choice([0, 0, 1, 2])
        if name == "num_partitions":
            return rng.choice([1, 2, -1])
        if name == "count":
            return rng.randint(1, MAX_PARTITIONS)
        if name == "replication_factor":
            return rng.choice([1, -1])
        if name == "acks":
            return rng.choice([-1, 1, 1, 0])
        if name in ("max_wait_ms",):
            return rng.choice([0, 10, 50])
        if name in ("timeout_ms", "transaction_timeout_ms"):
            return rng.choice([0, 1000, 5000])
        if name in ("rebalance_timeout_ms", "session_timeout_ms"):
            return rng.choice([1000, 6000])
        if name in ("min_bytes",):
            return rng.choice([0, 1])
        if name in ("max_bytes", "partition_max_bytes"):
            return rng.choice([1 << 20, 1024, 0])
        if name in ("replica_id", "broker_id", "leader_epoch", "current_leader_epoch", "last_fetched_epoch",
                    "committed_leader_epoch", "member_epoch", "generation_id", "generation_id_or_member_epoch",
                    "producer_epoch", "v3_and_below_producer_epoch"):
            return rng.choice([-1, -1, 0, 1])
        if name in ("producer_id", "v3_and_below_producer_id"):
            return rng.choice([-1, 0, 1])
        if name in ("fetch_offset", "offset", "committed_offset", "log_start_offset"):
            return rng.choice([0, 0, 1, 5, -1])
        if name == "timestamp":
            return rng.choice([-1, -2, -3, 0, 1_700_000_000_000])
        if name == "resource_type":
            return rng.choice([2, 2, 4])
        if name in ("isolation_level", "key_type", "config_operation", "endpoint_type"):
            return rng.choice([0, 1])
        if name in ("session_id", "session_epoch"):
            return rng.choice([0, -1]) if name == "session_epoch" else 0
        lo, hi = INT_RANGES.get(tn, (0, 100))
        return rng.randint(max(lo, -1), min(hi, 10))

    # --- structural mutations ---------------------------------------------------------
    def _mutate_slot(self, rng: random.Random, s: _Slot, version: int, flexible: bool) -> str:
        cur = s.parent[s.key]
        t = s.t
        name = s.path.rsplit(".", 1)[-1].split("[")[0]
        label = f"{s.path}:"
        if isinstance(t, Array):
            cur = cur if isinstance(cur, list) else []
            choice = rng.choice(["empty", "null", "dup", "dup", "lie_count", "many"])
            if choice in ("dup", "many"):
                if self._grown:  # one growing mutation per input: nested growth multiplies
                    choice = "lie_count"
                self._grown = True
            if choice == "empty":
                s.parent[s.key] = []
            elif choice == "null":
                s.parent[s.key] = None
            elif choice == "dup" and cur:
                s.parent[s.key] = list(cur) * rng.choice([2, 3, 50])
            elif choice == "many" and cur and not isinstance(t.item, StructType):
                s.parent[s.key] = list(cur) * 5000
            elif choice == "lie_count":
                s.parent[s.key] = LieLen(cur or [], rng.choice([-2, 0, len(cur or []) + 1, 1 << 20, (1 << 31) - 2,
                                                                 0x7FFFFFFE]))
            elif choice == "many" and cur:
                s.parent[s.key] = list(cur) * 300
            return label + choice
        if isinstance(t, StructType):
            if flexible and rng.random() < 0.3:
                s.parent[s.key] = None
                return label + "null_struct"
            s.parent[s.key] = Raw(rng.randbytes(rng.randrange(0, 12)))
            return label + "raw_struct"
        tn = t.name
        if tn == "records":
            if not isinstance(cur, bytes) or rng.random() < 0.1:
                s.parent[s.key] = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 80))])
                return label + "records_raw"
            new, kind = mutate_batch(rng, cur, self.opts)
            s.parent[s.key] = new
            return label + "batch_" + kind
        if tn in ("string", "bytes") or tn.startswith("[]"):
            return label + self._mutate_string(rng, s, name, cur)
        if tn == "bool":
            s.parent[s.key] = rng.choice([2, 255, -1])
            return label + "bool_byte"
        if tn == "uuid":
            s.parent[s.key] = uuid.UUID(int=rng.choice([0, 1, (1 << 128) - 1, rng.getrandbits(128)]))
            return label + "uuid"
        if tn == "float64":
            s.parent[s.key] = rng.choice([float("nan"), float("inf"), -1.0, 1e308])
            return label + "float"
        if tn not in INT_RANGES:
            return label + "skip"
        lo, hi = INT_RANGES[tn]
        if name in ("num_partitions", "count"):
            s.parent[s.key] = rng.choice([0, -1, -2, lo, MAX_PARTITIONS + 1])  # never a big count: see module doc
        elif name in TIMING_FIELDS:
            s.parent[s.key] = rng.choice([0, -1, lo, 1])
        elif name == "broker_ids" or (name == "partition_index" and "assignments" in s.path):
            s.parent[s.key] = rng.choice([0, -1, 1, lo, hi, 2])
        else:
            s.parent[s.key] = rng.choice([0, -1, 1, lo, hi, lo + 1, hi - 1, rng.randint(lo, hi)])
        return label + f"int={s.parent[s.key]}"

    def _mutate_string(self, rng: random.Random, s: _Slot, name: str, cur: Any) -> str:
        choices = ["empty", "huge", "non_utf8", "null", "lie_len", "dots", "long_name", "special"]
        if self.opts.internal_topics:
            choices += ["internal", "internal"]
        if self.opts.config_edges and name == "value":
            choices += ["numeric_edge"] * 4
        c = rng.choice(choices)
        if c == "empty":
            v: Any = ""
        elif c == "huge":
            v = "h" * rng.choice([256, 250, 32767, HUGE_STRING_BYTES])
        elif c == "non_utf8":
            v = BadStr(rng.choice([b"\xff", b"\xc0\x80", b"fz-\xed\xa0\x80", rng.randbytes(8)]))
        elif c == "null":
            v = None
        elif c == "lie_len":
            v = LieLen(cur if isinstance(cur, str) else "x", rng.choice([-2, 1000, 32767, (1 << 31) - 1]))
        elif c == "dots":
            v = rng.choice([".", "..", "fz.0", "fz_0"])
        elif c == "long_name":
            v = "t" * rng.choice([249, 250])
        elif c == "special":
            v = rng.choice(["a b", "a/b", "\0", "é", "__", "fz-0\n", "*", "fz-.*", "-1"])
        elif c == "internal":
            v = rng.choice(INTERNAL_TOPICS)
        else:
            v = rng.choice(NUMERIC_EDGE_STRINGS)
        s.parent[s.key] = v
        return c

    # --- byte level -------------------------------------------------------------------
    def _mutate_bytes(self, rng: random.Random, data: bytes, labels: list[str]) -> bytes:
        """Mutations of the body (after the 8-byte api/version/correlation header); size re-prefixed."""
        head, body = bytearray(data[4:12]), bytearray(data[12:])
        for _ in range(rng.choice([1, 1, 2, 4])):
            c = rng.choice(["flip", "flip", "truncate", "int_edge", "int_edge", "insert", "delete", "dup"])
            labels.append("b:" + c)
            if not body:
                body += rng.randbytes(4)
            p = rng.randrange(len(body))
            if c == "flip":
                body[p] ^= 1 << rng.randrange(8)
            elif c == "truncate":
                body = body[:p]
            elif c == "int_edge":
                width = rng.choice([1, 2, 4, 8])
                edge = rng.choice([0, 0xFF, 0x7F, 0x80]) if width == 1 else rng.choice(["max", "min", "neg1", "zero"])
                if width == 1:
                    val = bytes([edge])  # type: ignore[list-item]
                else:
                    val = {"max": b"\x7f" + b"\xff" * (width - 1), "min": b"\x80" + b"\0" * (width - 1),
                           "neg1": b"\xff" * width, "zero": b"\0" * width}[edge]  # type: ignore[index]
                body[p : p + width] = val
            elif c == "insert":
                body[p:p] = rng.randbytes(rng.randint(1, 16))
            elif c == "delete":
                del body[p : p + rng.randint(1, 16)]
            elif c == "dup":
                q = min(len(body), p + rng.randint(1, 64))
                body[q:q] = body[p:q]
        out = head + body
        return struct.pack(">i", len(out)) + bytes(out)

    def _mutate_header(self, rng: random.Random, data: bytes, api: Api, labels: list[str]) -> bytes:
        b = bytearray(data)
        c = rng.choice(["version", "version", "api_key", "correlation", "short"])
        labels.append("h:" + c)
        if c == "version":
            struct.pack_into(">h", b, 6, rng.choice([-1, api.max_version + 1, api.max_version + 50, 0x7FFF, -(1 << 15),
                                                     max(api.min_version - 1, 0)]))
        elif c == "api_key":
            struct.pack_into(">h", b, 4, rng.choice([-1, 0x7FFF, 72, 99, 1000, rng.randrange(0, 80)]))
        elif c == "correlation":
            struct.pack_into(">i", b, 8, rng.choice([0, -1, (1 << 31) - 1, -(1 << 31)]))
        else:
            b = b[: 4 + rng.randrange(0, 8)]
            struct.pack_into(">i", b, 0, len(b) - 4)
        return bytes(b)

    def _frame_lie(self, rng: random.Random, data: bytes, labels: list[str]) -> bytes:
        b = bytearray(data)
        lie = rng.choice([len(b) + 100, (1 << 31) - 1, -1, -(1 << 31), 0, 1 << 20])
        struct.pack_into(">i", b, 0, lie)
        labels.append(f"frame_size={lie}")
        return bytes(b)

    # --- bounds -------------------------------------------------------------------------
    def _decoded(self, fi: FuzzInput) -> Any:
        """The body as the broker's codec reads it, or None if it cannot (the broker closes then)."""
        from gregor.protocol.frames import decode_request

        api = apis.BY_KEY.get(fi.api_key)
        if api is None or len(fi.data) < 12 or not api.min_version <= fi.version <= api.max_version:
            return None
        try:
            return decode_request(memoryview(fi.data[4:]), api)[1]
        except Exception:
            return None

    def _too_many_partitions(self, fi: FuzzInput) -> bool:
        """A CreateTopics / CreatePartitions that would create more than MAX_PARTITIONS per topic."""
        if fi.api_key not in (19, 37):
            return False
        body = self._decoded(fi)
        if body is None:
            return False
        for t in body.get("topics") or []:
            n = t.get("num_partitions") if fi.api_key == 19 else t.get("count")
            if (isinstance(n, int) and n > MAX_PARTITIONS + 1) or len(t.get("assignments") or []) > MAX_PARTITIONS + 1:
                return True
        return False

    # --- does the broker have the right to keep it waiting? ---------------------------
    def _may_park(self, fi: FuzzInput) -> bool:
        """Decode the input as the broker would; True if a timing field asks for a long wait."""
        if fi.api_key not in (1, 11, 68, 19, 37, 22, 0, 20, 21, 24, 26):
            return False
        api = apis.BY_KEY.get(fi.api_key)
        if api is None:
            return False
        try:
            from gregor.protocol.frames import decode_request
            _, body = decode_request(memoryview(fi.data[4:]), api)
        except Exception:
            return False
        found = False

        def walk(v: Any) -> None:
            nonlocal found
            if isinstance(v, list):
                for x in v:
                    walk(x)
            elif hasattr(v, "__dict__"):
                for k, x in v.__dict__.items():
                    if k in TIMING_FIELDS and isinstance(x, int) and x > PARK_LIMIT_MS:
                        found = True
                    elif isinstance(x, (list,)) or hasattr(x, "__dict__"):
                        walk(x)

        walk(body)
        return found


def hexdump(data: bytes, width: int = 16, limit: int = 4096) -> str:
    lines = []
    for off in range(0, min(len(data), limit), width):
        chunk = data[off : off + width]
        hx = " ".join(f"{c:02x}" for c in chunk)
        asc = "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
        lines.append(f"{off:08x}  {hx:<{width * 3}} {asc}")
    if len(data) > limit:
        lines.append(f"... ({len(data) - limit} more bytes; crc32 {zlib.crc32(data):08x})")
    return "\n".join(lines)


Maker = Callable[[int], FuzzInput]
