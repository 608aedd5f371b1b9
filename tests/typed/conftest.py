"""A real broker and `gregor schema-registry` for the typed-column tests (one of each per test module), a
counting HTTP proxy in front of the registry, and confluent-kafka's serializers as the reference."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.broker_process import BrokerProcess
from tests.schema_registry.conftest import RegistryProcess, unique, wait_writable


@pytest.fixture(scope="module")
def typed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("typed-broker"), {"group.initial.rebalance.delay.ms": "0"}).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def registry_url(typed_broker: BrokerProcess) -> Iterator[str]:
    reg = RegistryProcess(typed_broker.bootstrap, {"schema.registry.topic": unique("_schemas"),
                                                   "schema.registry.group.id": unique("sr")}).start()
    wait_writable(reg.url)
    yield reg.url
    reg.kill()


@pytest.fixture
def sr_client(registry_url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url})


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def binary(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


class CountingProxy:
    """Forwards every request to the registry and counts them by method and path."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.counts: Counter[str] = Counter()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                proxy.counts[f"{self.command} {self.path}"] += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                req = urllib.request.Request(proxy.target + self.path, data=body, method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        status, data = resp.status, resp.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(registry_url: str) -> Iterator[CountingProxy]:
    p = CountingProxy(registry_url)
    yield p
    p.close()
