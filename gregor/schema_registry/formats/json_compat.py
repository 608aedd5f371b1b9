"""JSON Schema evolution: Confluent's rules, as rule code over two parsed schemas.

The question is always the same: does every document valid against the writer schema stay valid
against the reader schema? The walk compares the two schemas node by node and names each change the
way Confluent's JSON Schema diff does; only the changes that can make a writer's document invalid for
the reader are reported (so `[]` means compatible). The rules, in Confluent's names:

- types: changing a type is TYPE_CHANGED; integer to number is TYPE_EXTENDED (allowed), the reverse
  TYPE_NARROWED; a reader `{}`/`true` accepts anything; a writer `false` writes nothing.
- bounds (maxLength, minLength, pattern, maximum, minimum, exclusive bounds, multipleOf, maxItems,
  minItems, maxProperties, minProperties, uniqueItems): adding or tightening one is refused, removing or
  loosening one is allowed.
- objects and their content model: a closed model (`additionalProperties: false`) refuses properties it
  does not list; an open one accepts any. So a property may be added to a closed model (as an optional
  property, or a required one with a default), and removed from an open one; adding a property with a
  schema to an open model is refused (the writer may have written anything under that name), unless a
  partially open model (patternProperties / additionalProperties with a schema) already covered it the
  same way. Making a property required is refused unless it has a default.
- enums may gain values, not lose them; `anyOf`/`oneOf` may gain branches, `allOf` may lose them; a
  type may become one branch of a union (SUM_TYPE_EXTENDED); `not` may narrow.
- `$ref`s are followed (local pointers and the references given), each pair of nodes once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Resolver = Callable[[Any], Any]  # a node -> the node its $ref points to (itself when none)

_OBJECT_KEYS = ("properties", "additionalProperties", "patternProperties", "required", "maxProperties", "minProperties")
_ARRAY_KEYS = ("items", "prefixItems", "additionalItems", "maxItems", "minItems", "uniqueItems")
_STRING_KEYS = ("maxLength", "minLength", "pattern")
_NUMBER_KEYS = ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf")


def _kind(node: Any) -> str:
    """What Confluent's JSON Schema library would make of a node: empty, false, enum, combined, not,
    or one of the JSON types."""
    if node is True or node == {}:
        return "empty"
    if node is False:
        return "false"
    if not isinstance(node, dict):
        return "empty"
    if "enum" in node or "const" in node:
        return "enum"
    if any(k in node for k in ("allOf", "anyOf", "oneOf")):
        return "combined"
    t = node.get("type")
    if isinstance(t, list):
        return "combined" if len(t) != 1 else ("number" if t[0] == "integer" else t[0])
    if isinstance(t, str):
        return "number" if t == "integer" else t
    if "not" in node:
        return "not"
    for kind, keys in (("object", _OBJECT_KEYS), ("array", _ARRAY_KEYS), ("string", _STRING_KEYS),
                       ("number", _NUMBER_KEYS)):
        if any(k in node for k in keys):
            return kind
    return "empty"


def _branches(node: dict[str, Any]) -> tuple[str, list[Any]]:
    for crit in ("anyOf", "oneOf", "allOf"):
        if crit in node:
            return crit, list(node[crit])
    types = node.get("type")
    assert isinstance(types, list)
    rest = {k: v for k, v in node.items() if k != "type"}
    return "anyOf", [{**rest, "type": t} for t in types]


class JsonSchemaDiff:
    def __init__(self, resolve_writer: Resolver, resolve_reader: Resolver) -> None:
        self._rw = resolve_writer
        self._rr = resolve_reader
        self._seen: set[tuple[int, int]] = set()
        self.errors: list[str] = []

    def _add(self, path: str, kind: str) -> None:
        self.errors.append(f"{kind} at '{path or '#/'}'")

    def _sub_ok(self, writer: Any, reader: Any, path: str) -> bool:
        sub = JsonSchemaDiff(self._rw, self._rr)
        sub._seen = set(self._seen)
        sub.compare(writer, reader, path)
        return not sub.errors

    def compare(self, writer: Any, reader: Any, path: str = "#") -> None:
        writer, reader = self._rw(writer), self._rr(reader)
        key = (id(writer), id(reader))
        if key in self._seen:
            return  # a recursive schema: this pair is being compared further up
        self._seen.add(key)
        wk, rk = _kind(writer), _kind(reader)
        if wk != "combined" and rk == "combined":
            crit, branches = _branches(reader)
            if len(branches) == 1 or crit in ("anyOf", "oneOf"):
                if any(self._sub_ok(writer, b, path) for b in branches):
                    return  # SUM_TYPE_EXTENDED (or a singleton union)
        elif wk == "combined" and rk != "combined":
            crit, branches = _branches(writer)
            if len(branches) == 1 and self._sub_ok(branches[0], reader, path):
                return
            if crit in ("anyOf", "oneOf") and all(self._sub_ok(b, reader, path) for b in branches):
                return  # every branch the writer could use is readable
        if wk != rk:
            if wk == "false" or rk == "empty":
                return
            self._add(path, "TYPE_CHANGED")
            return
        if wk in ("empty", "false"):
            return
        check = getattr(self, f"_{wk}", None)
        if check is not None:  # a type JSON Schema does not define has nothing more to compare
            check(writer, reader, path)

    # --- scalars ------------------------------------------------------------------------------------
    def _bound(self, w: Any, r: Any, path: str, name: str, upper: bool) -> None:
        a, b = w.get(name), r.get(name)
        if a == b or b is None:
            return  # unchanged, or removed: allowed
        if a is None:
            self._add(f"{path}/{name}", f"{_const(name)}_ADDED")
        elif isinstance(a, bool) or isinstance(b, bool):  # draft-4 exclusive flags
            if b and not a:
                self._add(f"{path}/{name}", f"{_const(name)}_ADDED")
        elif (b < a) if upper else (b > a):
            self._add(f"{path}/{name}", f"{_const(name)}_{'DECREASED' if upper else 'INCREASED'}")

    def _string(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        self._bound(w, r, path, "maxLength", True)
        self._bound(w, r, path, "minLength", False)
        if r.get("pattern") is not None and r.get("pattern") != w.get("pattern"):
            self._add(f"{path}/pattern", "PATTERN_ADDED" if w.get("pattern") is None else "PATTERN_CHANGED")

    def _number(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        if _is_integer(r) and not _is_integer(w):
            self._add(path, "TYPE_NARROWED")
        for name, upper in (("maximum", True), ("minimum", False), ("exclusiveMaximum", True),
                            ("exclusiveMinimum", False)):
            self._bound(w, r, path, name, upper)
        a, b = w.get("multipleOf"), r.get("multipleOf")
        if b is not None and a != b:
            if a is None:
                self._add(f"{path}/multipleOf", "MULTIPLE_OF_ADDED")
            elif a % b != 0:
                self._add(f"{path}/multipleOf", "MULTIPLE_OF_CHANGED")

    def _boolean(self, w: Any, r: Any, path: str) -> None:
        pass

    def _null(self, w: Any, r: Any, path: str) -> None:
        pass

    def _enum(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        wv = w["enum"] if "enum" in w else [w["const"]]
        rv = r["enum"] if "enum" in r else [r["const"]]
        if not all(v in rv for v in wv):
            self._add(f"{path}/enum", "ENUM_ARRAY_NARROWED" if all(v in wv for v in rv) else "ENUM_ARRAY_CHANGED")

    def _not(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        # What the reader refuses must be refused by the writer already: the reversed question.
        if not self._sub_ok(r["not"], w["not"], f"{path}/not"):
            self._add(f"{path}/not", "NOT_TYPE_EXTENDED")

    def _combined(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        wc, wb = _branches(w)
        rc, rb = _branches(r)
        if wc != rc and not (wc == "oneOf" and rc == "anyOf"):
            self._add(path, "COMBINED_TYPE_CHANGED")
            return
        if wc == "allOf":  # every reader constraint must already hold for the writer's documents
            for i, b in enumerate(rb):
                if not any(self._sub_ok(x, b, f"{path}/{rc}/{i}") for x in wb):
                    self._add(f"{path}/{rc}/{i}", "PRODUCT_TYPE_EXTENDED")
        else:  # every branch the writer may use must be readable by some reader branch
            for i, b in enumerate(wb):
                if not any(self._sub_ok(b, x, f"{path}/{wc}/{i}") for x in rb):
                    self._add(f"{path}/{wc}/{i}", "SUM_TYPE_NARROWED")

    # --- objects ------------------------------------------------------------------------------------
    def _object(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        wp, rp = w.get("properties") or {}, r.get("properties") or {}
        wreq, rreq = set(w.get("required") or ()), set(r.get("required") or ())
        for name in wp:
            if name in rp and name in rreq and name not in wreq and not _has_default(self._rr(rp[name])):
                self._add(f"{path}/required/{name}", "REQUIRED_ATTRIBUTE_ADDED")
        for name in sorted(set(wp) | set(rp)):
            p = f"{path}/properties/{name}"
            if name not in rp:  # removed: the reader's content model must take what the writer wrote
                if _is_open(r):
                    continue
                partial = _partial_schema(r, name)
                if partial is not None:
                    if not self._sub_ok(wp[name], partial, p):
                        self._add(p, "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                elif wp[name] is not False:
                    self._add(p, "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            elif name not in wp:  # added: the writer's content model says what it may have written there
                if _is_open(w):
                    if _kind(self._rr(rp[name])) != "empty":
                        self._add(p, "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                    continue
                partial = _partial_schema(w, name)
                if partial is not None and not self._sub_ok(partial, rp[name], p):
                    self._add(p, "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                if name in rreq and not _has_default(self._rr(rp[name])):
                    self._add(p, "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
            else:
                self.compare(wp[name], rp[name], p)
        self._additional(w, r, path, "additionalProperties")
        self._dependencies(w, r, path)
        self._bound(w, r, path, "maxProperties", True)
        self._bound(w, r, path, "minProperties", False)

    def _additional(self, w: dict[str, Any], r: dict[str, Any], path: str, key: str) -> None:
        wa, ra = w.get(key, True), r.get(key, True)
        p = f"{path}/{key}"
        if (wa is not False) != (ra is not False):
            if ra is False:
                self._add(p, f"{_const(key)}_REMOVED")
        elif isinstance(ra, dict) and ra and not (isinstance(wa, dict) and wa):
            self._add(p, f"{_const(key)}_NARROWED")
        elif isinstance(ra, dict) and isinstance(wa, dict) and ra and wa:
            self.compare(wa, ra, p)

    def _dependencies(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        wd = {**(w.get("dependencies") or {}), **(w.get("dependentRequired") or {}), **(w.get("dependentSchemas") or {})}
        rd = {**(r.get("dependencies") or {}), **(r.get("dependentRequired") or {}), **(r.get("dependentSchemas") or {})}
        for name, rv in rd.items():
            p = f"{path}/dependencies/{name}"
            wv = wd.get(name)
            if wv is None:
                self._add(p, "DEPENDENCY_ARRAY_ADDED" if isinstance(rv, list) else "DEPENDENCY_SCHEMA_ADDED")
            elif isinstance(rv, list) and isinstance(wv, list):
                if not set(rv) <= set(wv):
                    self._add(p, "DEPENDENCY_ARRAY_EXTENDED" if set(wv) <= set(rv) else "DEPENDENCY_ARRAY_CHANGED")
            elif isinstance(rv, list) or isinstance(wv, list):
                self._add(p, "DEPENDENCY_CHANGED")
            else:
                self.compare(wv, rv, p)

    # --- arrays -------------------------------------------------------------------------------------
    def _array(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        wt, rt = _tuple_items(w), _tuple_items(r)
        if wt is None and rt is None:
            wi, ri = w.get("items", True), r.get("items", True)
            self.compare(wi, ri, f"{path}/items")
        else:
            wt, rt = wt or [], rt or []
            for i in range(max(len(wt), len(rt))):
                p = f"{path}/items/{i}"
                if i < len(wt) and i < len(rt):
                    self.compare(wt[i], rt[i], p)
                elif i < len(wt):  # the reader no longer lists it: its additional items must take it
                    extra = _additional_items(r)
                    if extra is False:
                        self._add(p, "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
                    elif isinstance(extra, dict) and extra and not self._sub_ok(wt[i], extra, p):
                        self._add(p, "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                else:  # the reader lists a new one: what the writer allowed there must fit it
                    extra = _additional_items(w)
                    if extra is True or extra == {}:
                        if _kind(self._rr(rt[i])) != "empty":
                            self._add(p, "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
                    elif isinstance(extra, dict) and not self._sub_ok(extra, rt[i], p):
                        self._add(p, "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            wa, ra = _additional_items(w), _additional_items(r)
            if wa is not False and ra is False:
                self._add(f"{path}/additionalItems", "ADDITIONAL_ITEMS_REMOVED")
            elif isinstance(wa, dict) and isinstance(ra, dict) and wa and ra:
                self.compare(wa, ra, f"{path}/additionalItems")
            elif isinstance(ra, dict) and ra and (wa is True or wa == {}):
                self._add(f"{path}/additionalItems", "ADDITIONAL_ITEMS_NARROWED")
        self._bound(w, r, path, "maxItems", True)
        self._bound(w, r, path, "minItems", False)
        if r.get("uniqueItems") and not w.get("uniqueItems"):
            self._add(f"{path}/uniqueItems", "UNIQUE_ITEMS_ADDED")


def _const(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _is_integer(node: dict[str, Any]) -> bool:
    t = node.get("type")
    return t == "integer" or t == ["integer"]


def _has_default(node: Any) -> bool:
    return isinstance(node, dict) and "default" in node


def _is_open(node: dict[str, Any]) -> bool:
    extra = node.get("additionalProperties", True)
    return not node.get("patternProperties") and (extra is True or extra == {})


def _partial_schema(node: dict[str, Any], name: str) -> Any:
    for pattern, schema in (node.get("patternProperties") or {}).items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    extra = node.get("additionalProperties", True)
    return extra if isinstance(extra, dict) and extra else None


def _tuple_items(node: dict[str, Any]) -> list[Any] | None:
    if "prefixItems" in node:
        return list(node["prefixItems"])
    items = node.get("items")
    return list(items) if isinstance(items, list) else None


def _additional_items(node: dict[str, Any]) -> Any:
    if "prefixItems" in node:
        return node.get("items", True)
    return node.get("additionalItems", True)
