"""The program that drives the C Avro decoder (gregor/typed/_avrodecode.c), compiled from a schema
fastavro has parsed, and the Arrow arrays made from the buffers it fills.

One node per Arrow array: records, list items, map keys and values, union members and leaves, in
preorder (a node's children come after it). The decoder reads the writer's schema only; reading into
another version of the schema is done on the finished arrays (gregor.typed.avro_resolve).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from gregor.typed import avro_types as at
from gregor.typed.errors import UnsupportedSchema

try:
    from gregor.typed import _avrodecode
except ImportError:  # no compiler at install time: every schema takes the per-record path
    _avrodecode = None  # type: ignore[assignment]

(K_NULL, K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_FIXED, K_ENUM, K_DEC_BYTES, K_DEC_FIXED,
 K_RECORD, K_ARRAY, K_MAP, K_UNION) = range(15)
_SIMPLE = {"boolean": (K_BOOL, 1), "int": (K_INT, 1), "long": (K_LONG, 1), "float": (K_FLOAT, 4),
           "double": (K_DOUBLE, 8), "bytes": (K_BYTES, 1), "string": (K_BYTES, 1), "null": (K_NULL, 0)}
_NUMPY_INT32 = np.dtype("<i4")


@dataclass
class Node:
    kind: int
    type: pa.DataType
    arg: int = 0
    children: list[int] = field(default_factory=list)
    branches: list[int] = field(default_factory=list)
    min_size: int = 1
    symbols: pa.Array | None = None
    names: list[str] = field(default_factory=list)  # a record's field names
    millis: bool = False  # a timestamp written in milliseconds


class Plan:
    """A writer schema compiled for the C decoder; `type` is the Arrow type of what it decodes."""

    def __init__(self, schema: Any, named: dict[str, Any]) -> None:
        self.nodes: list[Node] = []
        self._emit(schema, named, ())
        self.type = self._type_of(0)
        if self.type != at.arrow_type(schema, named):
            raise UnsupportedSchema("the C decoder's type differs from the schema's")

    def decoder(self) -> Any:
        if _avrodecode is None:
            raise UnsupportedSchema("the C Avro decoder is not built")
        return _avrodecode.Decoder([(n.kind, n.arg, n.children, n.branches, n.min_size) for n in self.nodes])

    # ---- compiling ----

    def _add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    def _emit(self, schema: Any, named: dict[str, Any], stack: tuple[str, ...]) -> int:
        schema = at.resolve(schema, named)
        kind = at.type_name(schema)
        lt = at.logical(schema)
        if kind == "union":
            has_null, members = at.union_shape(schema, named)
            promoted = at.promoted_union(members, named) if len(members) > 1 else None
            if promoted == "double":
                raise UnsupportedSchema("a [float, double] union is read per record")
            if len(members) <= 1 or promoted:
                me = self._add(Node(K_UNION, pa.null()))
                target = members[0] if members else "null"
                child = self._emit("long" if promoted else target, named, stack)
                self.nodes[me].children = [child]
                self.nodes[me].branches = [-1 if b not in members else 0 for b in schema]
                return me
            me = self._add(Node(K_UNION, pa.null(), arg=1))
            children = [self._emit(m, named, stack) for m in members]
            self.nodes[me].children = children
            self.nodes[me].branches = [members.index(b) if b in members else -1 for b in schema]
            return me
        if kind in _SIMPLE:
            k, size = _SIMPLE[kind]
            if lt == "decimal" and kind == "bytes":
                k = K_DEC_BYTES
            node = Node(k, pa.null(), min_size=size)
            node.millis = kind == "long" and lt in ("timestamp-millis", "local-timestamp-millis")
            node.type = at.arrow_type(schema, named)
            return self._add(node)
        if kind == "fixed":
            size = int(schema["size"])
            if lt == "decimal":
                if size > 16:
                    raise UnsupportedSchema("a decimal fixed wider than 16 bytes is read per record")
                return self._add(Node(K_DEC_FIXED, at.decimal_type(schema), arg=size, min_size=size))
            return self._add(Node(K_FIXED, pa.binary(), arg=size, min_size=size))
        if kind == "enum":
            symbols = list(schema["symbols"])
            return self._add(Node(K_ENUM, pa.string(), arg=len(symbols), symbols=pa.array(symbols, pa.string())))
        if kind == "record":
            if schema["name"] in stack:
                raise UnsupportedSchema(f"the Avro record {schema['name']} contains itself")
            me = self._add(Node(K_RECORD, pa.null(), names=[f["name"] for f in schema["fields"]]))
            children = [self._emit(f["type"], named, (*stack, schema["name"])) for f in schema["fields"]]
            self.nodes[me].children = children
            self.nodes[me].min_size = sum(self.nodes[c].min_size for c in children)
            return me
        if kind == "array":
            me = self._add(Node(K_ARRAY, pa.null()))
            self.nodes[me].children = [self._emit(schema["items"], named, stack)]
            return me
        if kind == "map":
            me = self._add(Node(K_MAP, pa.null()))
            keys = self._add(Node(K_BYTES, pa.string()))
            self.nodes[me].children = [keys, self._emit(schema["values"], named, stack)]
            return me
        raise UnsupportedSchema(f"unknown Avro type {kind!r}")

    def _type_of(self, i: int) -> pa.DataType:
        """The Arrow type node i builds, filled in bottom-up (records, lists, maps, unions)."""
        n = self.nodes[i]
        kids = [self._type_of(c) for c in n.children]
        if n.kind == K_RECORD:
            n.type = self._record_type(i, kids)
        elif n.kind == K_ARRAY:
            n.type = pa.list_(pa.field("element", kids[0], nullable=self._nullable(n.children[0])))
        elif n.kind == K_MAP:
            n.type = pa.map_(pa.field("key", pa.string(), nullable=False),
                             pa.field("value", kids[1], nullable=self._nullable(n.children[1])))
        elif n.kind == K_UNION:
            n.type = kids[0] if not n.arg else pa.struct(
                [pa.field(f"member{j}", t, nullable=True) for j, t in enumerate(kids)])
        return n.type

    def _nullable(self, i: int) -> bool:
        n = self.nodes[i]
        return n.kind == K_NULL or (n.kind == K_UNION and -1 in n.branches)

    def _record_type(self, i: int, kids: list[pa.DataType]) -> pa.DataType:
        n = self.nodes[i]
        return pa.struct([pa.field(name, t, nullable=self._nullable(c))
                          for name, t, c in zip(n.names, kids, n.children, strict=True)])

    # ---- building arrays ----

    def build(self, out: list[tuple[int, int, Any, Any, Any]], i: int = 0) -> pa.Array:
        """The Arrow array of node i from the decoder's finish() buffers (strings not yet checked for UTF-8:
        the caller validates the whole array)."""
        n = self.nodes[i]
        length, nulls, valid, offs, data = out[i]
        vbuf = pa.py_buffer(valid) if valid is not None else None
        offs, data = _buffer(offs), _buffer(data)
        k = n.kind
        if k == K_UNION and not n.arg:
            return self.build(out, n.children[0])
        if k == K_NULL:
            return pa.nulls(length)
        if k in (K_RECORD, K_UNION):
            kids = [self.build(out, c) for c in n.children]
            return pa.StructArray.from_buffers(n.type, length, [vbuf], nulls, children=kids)
        if k == K_ARRAY:
            return pa.ListArray.from_buffers(n.type, length, [vbuf, offs], nulls,
                                             children=[self.build(out, n.children[0])])
        if k == K_MAP:
            keys, values = self.build(out, n.children[0]), self.build(out, n.children[1])
            entries = pa.StructArray.from_arrays([keys, values], fields=[n.type.key_field, n.type.item_field])
            return pa.MapArray.from_buffers(n.type, length, [vbuf, offs], nulls, children=[entries])
        if k == K_ENUM:
            idx = pa.Array.from_buffers(pa.int32(), length, [vbuf, data], nulls)
            assert n.symbols is not None
            return n.symbols.take(idx)
        if k in (K_BYTES, K_FIXED):
            return pa.Array.from_buffers(n.type, length, [vbuf, offs, data], nulls)
        if n.millis:
            raw = pa.Array.from_buffers(pa.timestamp("ms", tz=n.type.tz), length, [vbuf, data], nulls)
            return raw.cast(n.type)
        return pa.Array.from_buffers(n.type, length, [vbuf, data], nulls)


def compile_plan(schema: Any, named: dict[str, Any]) -> Plan | None:
    """The plan for `schema`, or None where only the per-record path reads it."""
    if _avrodecode is None:
        return None
    try:
        return Plan(schema, named)
    except UnsupportedSchema:
        return None


def _buffer(chunk: Any) -> pa.Buffer:
    return pa.py_buffer(chunk if chunk is not None else b"")


def int32_view(buf: pa.Buffer | None, offset: int, count: int) -> np.ndarray:
    if buf is None:
        return np.zeros(count, dtype=_NUMPY_INT32)
    return np.frombuffer(buf, dtype=_NUMPY_INT32, count=count, offset=offset * 4)
