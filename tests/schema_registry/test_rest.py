"""The REST API as curl sees it: Confluent's error codes and bodies, media types, deletes, modes, levels,
normalization and the bounds, against `gregor schema-registry` in front of a real broker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import V1, RegistryProcess, http, unique, wait_writable

pytestmark = pytest.mark.timeout(180)


def avro(*fields: dict[str, object], name: str = "R") -> dict[str, object]:
    return {"schema": json.dumps({"type": "record", "name": name, "fields": list(fields)})}


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": "string", "default": ""}
B_REQUIRED = {"name": "b", "type": "string"}


@pytest.fixture(scope="module")
def reg(sr_broker: BrokerProcess) -> Iterator[str]:
    r = RegistryProcess(sr_broker.bootstrap, {"schema.registry.topic": unique("_schemas"),
                                              "schema.registry.group.id": unique("sr")}).start()
    try:
        wait_writable(r.url)
        yield r.url
    finally:
        r.kill()


def err(reply: object) -> tuple[int, int]:
    r = reply
    assert r.headers["content-type"].startswith("application/vnd.schemaregistry.v1+json"), r.headers  # type: ignore[attr-defined]
    body = r.json  # type: ignore[attr-defined]
    assert set(body) == {"error_code", "message"} and body["message"], body
    return r.status, body["error_code"]  # type: ignore[attr-defined]


def register(url: str, subject: str, body: dict[str, object], query: str = "") -> int:
    r = http("POST", f"{url}/subjects/{subject}/versions{query}", body)
    assert r.status == 200, r.body
    return int(r.json["id"])


def test_media_types(reg: str) -> None:
    assert http("GET", f"{reg}/subjects").headers["content-type"].startswith(V1)
    for accept in ("application/vnd.schemaregistry+json", "application/json"):
        assert http("GET", f"{reg}/subjects", headers={"Accept": accept}).headers["content-type"].startswith(accept)
    assert http("GET", f"{reg}/subjects", headers={"Accept": "text/html, */*;q=0.1"}).headers["content-type"].startswith(V1)
    assert err(http("GET", f"{reg}/subjects", headers={"Accept": "text/html"})) == (406, 406)
    assert err(http("POST", f"{reg}/subjects/{unique('m')}/versions", raw=b'{"schema": "\\"int\\""}',
                    headers={"Content-Type": "text/plain"})) == (415, 415)
    s = unique("m")
    for kind in ("application/json", "application/vnd.schemaregistry+json", "application/octet-stream"):
        r = http("POST", f"{reg}/subjects/{s}/versions", raw=b'{"schema": "\\"int\\""}', headers={"Content-Type": kind})
        assert r.status == 200, r.body
    assert err(http("GET", f"{reg}/no/such/route")) == (404, 404)
    assert err(http("PATCH", f"{reg}/subjects")) == (405, 405)
    assert err(http("POST", f"{reg}/subjects/{s}/versions", raw=b"{not json")) == (400, 400)
    assert http("GET", f"{reg}/").json == {}
    assert sorted(http("GET", f"{reg}/schemas/types").json) == ["AVRO", "JSON", "PROTOBUF"]


def test_not_found_and_invalid(reg: str) -> None:
    s = unique("nf")
    assert err(http("GET", f"{reg}/subjects/{s}/versions")) == (404, 40401)
    assert err(http("GET", f"{reg}/subjects/{s}/versions/latest")) == (404, 40401)
    register(reg, s, avro(A))
    assert err(http("GET", f"{reg}/subjects/{s}/versions/9")) == (404, 40402)
    assert err(http("GET", f"{reg}/subjects/{s}/versions/abc")) == (422, 42202)
    assert err(http("GET", f"{reg}/subjects/{s}/versions/0")) == (422, 42202)
    assert err(http("GET", f"{reg}/schemas/ids/987654")) == (404, 40403)
    assert err(http("POST", f"{reg}/subjects/{s}", avro(B_REQUIRED))) == (404, 40403)
    assert err(http("POST", f"{reg}/subjects/{s}/versions", {"schema": "{\"type\": \"nope\"}"})) == (422, 42201)
    assert err(http("POST", f"{reg}/subjects/{s}/versions", {"schema": "{", "schemaType": "JSON"})) == (422, 42201)
    assert err(http("POST", f"{reg}/subjects/{s}/versions", {"schema": "message {", "schemaType": "PROTOBUF"})) == (422, 42201)
    assert err(http("POST", f"{reg}/subjects/{s}/versions", {"schema": "\"int\"", "schemaType": "XML"})) == (422, 42201)
    assert err(http("PUT", f"{reg}/config/{s}", {"compatibility": "SIDEWAYS"})) == (422, 42203)
    assert err(http("PUT", f"{reg}/mode/{s}", {"mode": "WRITEONLY"})) == (422, 42204)
    assert err(http("GET", f"{reg}/config/{s}")) == (404, 40408)
    assert http("GET", f"{reg}/config/{s}?defaultToGlobal=true").json == {"compatibilityLevel": "BACKWARD"}
    assert err(http("GET", f"{reg}/mode/{s}")) == (404, 40409)
    assert http("GET", f"{reg}/mode").json == {"mode": "READWRITE"}
    got = http("GET", f"{reg}/subjects/{s}/versions/latest").json
    assert set(got) == {"subject", "version", "id", "schema"} and got["version"] == 1
    compact = json.dumps(json.loads(str(avro(A)["schema"])), separators=(",", ":"))
    assert http("GET", f"{reg}/subjects/{s}/versions/1/schema").body.decode() == compact


def test_soft_and_hard_delete(reg: str) -> None:
    s = unique("del")
    id1 = register(reg, s, avro(A, name="Del"))  # a schema no other subject holds
    register(reg, s, avro(A, B_DEFAULT, name="Del"))
    assert err(http("DELETE", f"{reg}/subjects/{s}/versions/1?permanent=true")) == (404, 40407)
    assert http("DELETE", f"{reg}/subjects/{s}/versions/1").json == 1
    assert err(http("DELETE", f"{reg}/subjects/{s}/versions/1")) == (404, 40406)
    assert err(http("GET", f"{reg}/subjects/{s}/versions/1")) == (404, 40402)
    assert http("GET", f"{reg}/subjects/{s}/versions/1?deleted=true").json["id"] == id1
    assert http("GET", f"{reg}/subjects/{s}/versions").json == [2]
    assert http("GET", f"{reg}/subjects/{s}/versions?deleted=true").json == [1, 2]
    assert err(http("DELETE", f"{reg}/subjects/{s}?permanent=true")) == (404, 40405)
    assert http("DELETE", f"{reg}/subjects/{s}").json == [2]
    assert err(http("DELETE", f"{reg}/subjects/{s}")) == (404, 40404)
    assert s not in http("GET", f"{reg}/subjects").json
    assert s in http("GET", f"{reg}/subjects?deleted=true").json
    assert err(http("GET", f"{reg}/subjects/{s}/versions")) == (404, 40401)
    assert http("GET", f"{reg}/schemas/ids/{id1}").status == 200  # soft-deleted versions still name their ids
    assert http("DELETE", f"{reg}/subjects/{s}?permanent=true").json == [1, 2]
    assert s not in http("GET", f"{reg}/subjects?deleted=true").json
    assert err(http("GET", f"{reg}/schemas/ids/{id1}")) == (404, 40403)
    assert register(reg, s, avro(A, name="Del")) > id1  # registered again after a hard delete: a new id, version 1
    assert http("GET", f"{reg}/subjects/{s}/versions").json == [1]


def test_ids_listings_and_references(reg: str) -> None:
    s1, s2 = unique("ids"), unique("ids")
    sid = register(reg, s1, avro(A, name="Shared"))
    assert register(reg, s2, avro(A, name="Shared")) == sid
    assert register(reg, s1, avro(A, name="Shared")) == sid  # registering again: no new version
    assert http("GET", f"{reg}/subjects/{s1}/versions").json == [1]
    assert http("GET", f"{reg}/schemas/ids/{sid}/subjects").json == sorted([s1, s2])
    assert http("GET", f"{reg}/schemas/ids/{sid}/versions").json == sorted(
        [{"subject": s1, "version": 1}, {"subject": s2, "version": 1}], key=lambda x: x["subject"])
    assert [x["subject"] for x in http("GET", f"{reg}/schemas?subjectPrefix={s1}").json] == [s1]
    looked = http("POST", f"{reg}/subjects/{s2}", avro(A, name="Shared")).json
    assert (looked["subject"], looked["version"], looked["id"]) == (s2, 1, sid)
    # A JSON schema referencing another subject's schema by name.
    addr = unique("address")
    aid = register(reg, addr, {"schemaType": "JSON", "schema": json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}})})
    user = unique("user")
    body = {"schemaType": "JSON", "references": [{"name": "address.json", "subject": addr, "version": 1}],
            "schema": json.dumps({"type": "object", "properties": {"home": {"$ref": "address.json"}}})}
    uid = register(reg, user, body)
    got = http("GET", f"{reg}/schemas/ids/{uid}").json
    assert got["schemaType"] == "JSON" and got["references"] == body["references"]
    assert http("GET", f"{reg}/subjects/{addr}/versions/1/referencedby").json == [uid]
    assert err(http("DELETE", f"{reg}/subjects/{addr}/versions/1")) == (422, 42206)
    bad = {**body, "references": [{"name": "address.json", "subject": addr, "version": 7}]}
    assert err(http("POST", f"{reg}/subjects/{user}/versions", bad)) == (422, 42201)
    assert aid != uid


def test_levels_and_the_compatibility_endpoint(reg: str) -> None:
    s = unique("lvl")
    register(reg, s, avro(A))
    register(reg, s, avro(A, B_DEFAULT))
    v3 = avro(A, B_REQUIRED)  # reads v2's data, not v1's: BACKWARD allows it, BACKWARD_TRANSITIVE does not
    assert http("POST", f"{reg}/compatibility/subjects/{s}/versions/latest", v3).json == {"is_compatible": True}
    assert http("POST", f"{reg}/compatibility/subjects/{s}/versions/1", v3).json == {"is_compatible": False}
    verbose = http("POST", f"{reg}/compatibility/subjects/{s}/versions/1?verbose=true", v3).json
    assert verbose["is_compatible"] is False and "READER_FIELD_MISSING_DEFAULT_VALUE" in verbose["messages"][0]
    assert http("PUT", f"{reg}/config/{s}", {"compatibility": "backward_transitive"}).json == \
        {"compatibility": "BACKWARD_TRANSITIVE"}
    assert http("GET", f"{reg}/config/{s}").json == {"compatibilityLevel": "BACKWARD_TRANSITIVE"}
    assert http("POST", f"{reg}/compatibility/subjects/{s}/versions", v3).json == {"is_compatible": False}
    assert err(http("POST", f"{reg}/subjects/{s}/versions", v3)) == (409, 409)
    assert http("PUT", f"{reg}/config/{s}", {"compatibility": "BACKWARD"}).status == 200
    assert register(reg, s, v3) > 0
    assert http("DELETE", f"{reg}/config/{s}").json == {"compatibilityLevel": "BACKWARD"}
    assert err(http("GET", f"{reg}/config/{s}")) == (404, 40408)
    # FORWARD: the old schema must read the new one's data; removing a field without a default breaks it.
    f = unique("fwd")
    http("PUT", f"{reg}/config/{f}", {"compatibility": "FORWARD"})
    register(reg, f, avro(A, B_REQUIRED))
    assert err(http("POST", f"{reg}/subjects/{f}/versions", avro(A))) == (409, 409)
    assert http("PUT", f"{reg}/config/{f}", {"compatibility": "NONE"}).status == 200
    assert register(reg, f, avro({"name": "z", "type": "boolean"})) > 0


def test_modes_and_import(reg: str, sr_broker: BrokerProcess) -> None:
    s = unique("ro")
    register(reg, s, avro(A))
    assert http("PUT", f"{reg}/mode/{s}", {"mode": "READONLY"}).json == {"mode": "READONLY"}
    assert err(http("POST", f"{reg}/subjects/{s}/versions", avro(A, B_DEFAULT))) == (422, 42205)
    assert err(http("DELETE", f"{reg}/subjects/{s}")) == (422, 42205)
    assert http("DELETE", f"{reg}/mode/{s}").json == {"mode": "READONLY"}
    assert register(reg, s, avro(A, B_DEFAULT)) > 0
    imp = unique("imp")
    assert err(http("POST", f"{reg}/subjects/{imp}/versions", {**avro(A), "id": 5000, "version": 3})) == (422, 42205)
    assert http("PUT", f"{reg}/mode/{imp}", {"mode": "IMPORT"}).json == {"mode": "IMPORT"}
    assert err(http("PUT", f"{reg}/mode/{s}", {"mode": "IMPORT"})) == (422, 42205)  # holds versions: needs force
    assert err(http("POST", f"{reg}/subjects/{imp}/versions", avro(A, name="Imp"))) == (422, 42205)
    assert register(reg, imp, {**avro(A, name="Imp"), "id": 5000, "version": 3}) == 5000
    assert http("GET", f"{reg}/subjects/{imp}/versions/3").json["id"] == 5000
    other = avro(B_REQUIRED, name="Other")
    assert err(http("POST", f"{reg}/subjects/{imp}/versions", {**other, "id": 5000, "version": 4})) == (422, 42207)
    http("DELETE", f"{reg}/mode/{imp}")
    assert register(reg, imp, avro(A, B_DEFAULT, name="Imp")) == 5001  # ids go on past the imported one


def test_normalize(reg: str) -> None:
    s = unique("norm")
    spaced = {"schema": '{ "type" : "record", "name" : "N", "fields" : [ {"name":"a","type":"int"} ] }'}
    sid = register(reg, s, spaced)
    assert register(reg, s, {"schema": '{"type":"record","name":"N","fields":[{"name":"a","type":"int"}]}'}) == sid
    j = unique("jnorm")
    jid = register(reg, j, {"schemaType": "JSON", "schema": '{"type":"object","properties":{"x":{"type":"string"}}}'},
                   "?normalize=true")
    reordered = {"schemaType": "JSON", "schema": '{"properties":{"x":{"type":"string"}},"type":"object"}'}
    assert register(reg, j, reordered, "?normalize=true") == jid
    assert http("POST", f"{reg}/subjects/{j}?normalize=true", reordered).json["id"] == jid


def test_bounds(start_registry: Callable[..., RegistryProcess]) -> None:
    r = start_registry({"schema.registry.max.request.bytes": "2048", "schema.registry.max.subjects": "2",
                        "schema.registry.max.schemas.per.subject": "2"})
    wait_writable(r.url, subject="a")
    big = avro(*[{"name": f"f{i}", "type": "string", "default": "x" * 40} for i in range(60)])
    assert err(http("POST", f"{r.url}/subjects/a/versions", big)) == (413, 413)
    register(r.url, "a", avro(A))
    register(r.url, "a", avro(A, B_DEFAULT))
    status, code = err(http("POST", f"{r.url}/subjects/a/versions", avro(A, B_DEFAULT, {"name": "c", "type": "int",
                                                                                         "default": 0})))
    assert (status, code) == (422, 42205)
    register(r.url, "b", avro(A))
    assert err(http("POST", f"{r.url}/subjects/c/versions", avro(A))) == (422, 42205)
    assert "schema.registry.max.subjects" in http("POST", f"{r.url}/subjects/c/versions", avro(A)).json["message"]
