"""JSON schemas: checked against their draft's meta-schema by `jsonschema`, compared by json_compat.

A schema (and each schema it references) must be valid for its `$schema` draft (draft 7 when it names
none, as Confluent defaults), and every `$ref` in it must resolve: to a JSON pointer inside its own
document, or to a referenced schema by the reference's name (or the referenced document's `$id`),
optionally with a pointer after `#`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from gregor.schema_registry.errors import invalid_schema
from gregor.schema_registry.formats.base import Dependency, ParsedSchema
from gregor.schema_registry.formats.json_compat import JsonSchemaDiff
from gregor.schema_registry.records import JSON, Reference

_MAX_REF_HOPS = 64  # a $ref chain longer than this is a loop of references to references


def _walk(node: Any, visit: Any) -> None:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            visit(n)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)


def _pointer(doc: Any, fragment: str) -> Any:
    if fragment in ("", "/"):
        return doc
    if not fragment.startswith("/"):
        raise KeyError(fragment)
    node = doc
    for part in fragment[1:].split("/"):
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


class JsonSchema:
    schema_type = JSON

    def __init__(self, obj: Any, docs: dict[str, Any]) -> None:
        self.obj = obj
        self._docs = docs  # reference name (and $id) -> referenced document
        self._root_of: dict[int, Any] = {}
        for doc in [obj, *docs.values()]:
            _walk(doc, lambda n, d=doc: self._root_of.setdefault(id(n), d))

    @property
    def docs(self) -> dict[str, Any]:
        """The referenced documents, by reference name (and `$id`)."""
        return self._docs

    def canonical(self) -> str:
        return json.dumps(self.obj, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> str:
        return json.dumps(self.obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True)

    def formatted(self, fmt: str) -> str | None:
        return None

    def resolve(self, node: Any) -> Any:
        """The node a `$ref` leads to (following chains), or the node itself. Raises KeyError if unresolvable."""
        for _ in range(_MAX_REF_HOPS):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            url, _, fragment = node["$ref"].partition("#")
            doc = self._root_of.get(id(node), self.obj) if not url else self._document(url)
            node = _pointer(doc, fragment)
        raise KeyError("a loop of $refs")

    def _document(self, url: str) -> Any:
        if url in self._docs:
            return self._docs[url]
        for name, doc in self._docs.items():
            if url.endswith("/" + name) or name.endswith("/" + url):
                return doc
        raise KeyError(url)

    def reader_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return [f"a {writer.schema_type} schema cannot be read as JSON"]
        diff = JsonSchemaDiff(writer.resolve, self.resolve)
        try:
            diff.compare(writer.obj, self.obj)
        except (KeyError, IndexError, TypeError, RecursionError) as e:
            return [f"the schemas cannot be compared: {e!r}"]
        return diff.errors


def _load_checked(text: str, what: str) -> Any:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise invalid_schema(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict | bool):
        raise invalid_schema(f"{what} is not a JSON object")
    try:
        cls = jsonschema.validators.validator_for(obj, default=jsonschema.Draft7Validator)
        cls.check_schema(obj)
    except jsonschema.exceptions.SchemaError as e:
        raise invalid_schema(f"{what}: {e.message}") from None
    return obj


def parse_json(text: str, references: tuple[Reference, ...], deps: list[Dependency]) -> JsonSchema:
    docs: dict[str, Any] = {}
    for dep in deps:
        doc = _load_checked(dep.schema, f"reference {dep.name}")
        docs[dep.name] = doc
        if isinstance(doc, dict) and isinstance(doc.get("$id"), str):
            docs.setdefault(doc["$id"], doc)
    schema = JsonSchema(_load_checked(text, "the schema"), docs)
    refs: list[dict[str, Any]] = []
    for doc in [schema.obj, *docs.values()]:
        _walk(doc, lambda n: refs.append(n) if isinstance(n.get("$ref"), str) else None)
    for node in refs:
        try:
            schema.resolve(node)
        except (KeyError, IndexError, ValueError, TypeError):
            raise invalid_schema(f"$ref {node['$ref']} does not resolve (to a definition in the schema or to a "
                                 f"referenced schema)") from None
    return schema
