"""kcat (Debian's, librdkafka 2.0): produce keyed messages with headers and every codec, consume as JSON."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.broker_process import BrokerProcess
from tests.clients.common import CODECS, Msg, assert_same, make_messages

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install.sh")


def kcat(*args: str, stdin: bytes | None = None) -> bytes:
    res = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    msgs = make_messages(200, seed=4, text=True)
    # kcat has no admin API: the topic is auto-created (num.partitions=1) by its metadata request.
    produced: list[tuple[int, int, Msg]] = []
    lines = b"".join(m.key + b"\t" + (m.value or b"") + b"\n" for m in msgs)
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec,
         "-X", "acks=all", "-X", "enable.idempotence=true", "-H", "source=kcat", stdin=lines)
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    consumed: list[tuple[int, int, Msg]] = []
    for line in out.decode().splitlines():
        doc = json.loads(line)
        hs = doc.get("headers") or []
        headers = [(hs[i], hs[i + 1].encode()) for i in range(0, len(hs), 2)]
        consumed.append((doc["partition"], doc["offset"], Msg(doc["key"].encode(), doc["payload"].encode(), headers)))
    for i, m in enumerate(msgs):
        produced.append((0, i, Msg(m.key, m.value, [("source", b"kcat")])))
    assert_same(produced, consumed)
