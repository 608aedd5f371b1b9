"""The broker fuzzer's short run (benchmarks/fuzz_broker.py): a real broker, ~3,000 mutated requests
of every advertised API over real sockets, then SIGTERM and a restart that must serve the canary.

The long run (>= 1,000,000 inputs) is `python benchmarks/fuzz_broker.py`; this is the same code on
a fixed seed, leaving out the input classes issue 8 lists as known to break today's broker
(`Options.safe()`: internal topics, config edge values, decompression bombs, lying batches).
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.fuzz_broker import run
from benchmarks.fuzzlib import InputMaker, Options, encode_request
from gregor.protocol import apis
from gregor.protocol.errors import ErrorCode
from gregor.protocol.frames import encode_request as codec_encode_request
from gregor.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess
from tests.wire import WireClient

SEED = 8
COUNT = 3000

# Log errors the fuzzer found on the landed broker that no slice of issue 8 fixes yet, each with the
# input that reproduces it (see the fuzz slice's report). Remove an entry when its fix lands: the
# test then fails if the error comes back.
OPEN_FINDINGS: dict[str, re.Pattern[str]] = {
    # Log errors the short run tolerates while a known finding is open (none now: the four fuzz findings
    # below were fixed in issue 8; add one here, with its reproducer below, when the fuzzer finds more).
}


@pytest.mark.serial  # no probe slower than 3 s
def test_short_fuzz_run_no_traceback_no_hang_and_restart_serves_canary(tmp_path: Path) -> None:
    r = run(SEED, COUNT, connections=4, batch=32, opts=Options.safe(), hang_timeout_s=20.0,
            probe_limit_s=3.0,  # the benchmark's limit is 1 s; 3 s here, where CI shares 2 cores with other jobs
            data_dir=tmp_path, out_dir=tmp_path / "findings", triage_max=0)
    assert r.inputs_sent == COUNT
    assert r.outcomes["answered"] > COUNT // 4, r.outcomes  # the broker really served them...
    # ...of every advertised API (a header mutation may also name an API the broker does not serve: few inputs)
    assert all(r.answered_by_api[name] > 0 for name, n in r.by_api.items()
               if n >= 20 and name != "unknown"), r.answered_by_api
    assert r.restart_ok, [f.detail[:2000] for f in r.findings if f.kind == "restart"]
    others = [f"{f.kind}: {f.detail[:2000]}" for f in r.findings if f.kind != "log_error"]
    assert not others, others  # no hang, no slow or failed probe, no death, canary intact
    unknown = [f.detail[:3000] for f in r.findings if f.kind == "log_error"
               and not any(p.search(f.detail) for p in OPEN_FINDINGS.values())]
    assert not unknown, unknown


def test_the_checks_notice_a_frozen_broker(tmp_path: Path) -> None:
    """The short run above can fail: a broker stopped (SIGSTOP) for 4 s mid-run is reported as hung and slow."""
    def freeze(b: BrokerProcess) -> None:
        time.sleep(0.5)
        assert b.proc is not None
        b.proc.send_signal(signal.SIGSTOP)
        time.sleep(4.0)
        b.proc.send_signal(signal.SIGCONT)

    # sending for 4 s whatever the machine's speed, so the freeze (0.5 s to 4.5 s) lands mid-run
    # Small batches on several connections: a batch holding a Fetch that may park on purpose is not
    # counted as a hang, and with 2 connections of 32 inputs every batch in flight sometimes held one.
    r = run(SEED, 10**6, connections=4, batch=4, opts=Options.safe(), hang_timeout_s=2.0, probe_limit_s=1.0,
            time_limit_s=4.0, data_dir=tmp_path, triage_max=0, during=freeze)
    kinds = r.finding_kinds()
    assert kinds["hang"] >= 1 and kinds["slow_probe"] + kinds["probe_failed"] >= 1, kinds
    assert r.restart_ok


def _versions() -> dict[int, tuple[int, int]]:
    return {a.key: (a.min_version, a.max_version) for a in apis.ALL}


def test_inputs_are_reproducible_from_seed_and_index() -> None:
    a, b = InputMaker(5, _versions()), InputMaker(5, _versions())
    for i in (0, 1, 77, 2999, 123456):
        assert a.make(i).data == b.make(i).data
    assert InputMaker(6, _versions()).make(77).data != a.make(77).data


def test_fuzz_encoder_matches_the_codec_on_valid_requests() -> None:
    """The fuzzer's own encoder (which can lie) writes exactly what gregor.protocol writes when it does not."""
    maker = InputMaker(1, _versions())
    for i in range(1500):
        rng = random.Random(i)
        api = apis.BY_KEY[rng.choice(maker.keys)]
        v = rng.randint(api.min_version, api.max_version)
        body = maker._struct(rng, api.request.fields, v, v >= api.flexible_from, api.name, [])
        assert encode_request(api, v, 7, "fuzz", body) == codec_encode_request(api, v, 7, "fuzz", body), (api.name, v)


# --- findings of the fuzzer, one reproducer each (each failed on the broker before its fix) ---------

@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz-findings")).start()
    yield b
    b.kill()


def _bad_lines_since(b: BrokerProcess, pos: int) -> list[str]:
    time.sleep(0.3)  # the log reader thread lags a little
    return [ln for ln in b.log_lines[pos:] if re.search(r"Traceback|\bERROR\b", ln)]


def test_describe_configs_of_a_32767_byte_name_is_answered(fuzz_broker: BrokerProcess) -> None:
    pos = len(fuzz_broker.log_lines)
    c = WireClient(fuzz_broker.bootstrap)
    resp = c.request(32, 1, {"resources": [{"resource_type": 2, "resource_name": "h" * 32767,
                                            "configuration_keys": None}], "include_synonyms": False})
    assert resp.results[0].error_code != 0
    assert not _bad_lines_since(fuzz_broker, pos)


def test_group_id_over_32767_bytes_is_refused(fuzz_broker: BrokerProcess) -> None:
    pos = len(fuzz_broker.log_lines)
    g = "g" * 40000
    c = WireClient(fuzz_broker.bootstrap)
    try:  # Kafka refuses strings over 32767 bytes while parsing, compact or not: a closed connection is fine
        c.request(11, 6, {"group_id": g, "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000, "member_id": "",
                          "group_instance_id": None, "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}]})
    except ConnectionError:
        pass
    c = WireClient(fuzz_broker.bootstrap)
    assert c.request(16, 0, {}).error_code == 0  # today: closed, as long as the group exists (any client)
    try:
        c.request(42, 2, {"groups_names": [g]})
    except ConnectionError:
        pass
    assert not _bad_lines_since(fuzz_broker, pos)


def test_delete_of_a_249_character_topic(fuzz_broker: BrokerProcess) -> None:
    name = "d" * 249
    c = WireClient(fuzz_broker.bootstrap)
    assert _create(c, name) == 0
    r = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": build_batch([Record(0, int(time.time() * 1000),
                                                                                       b"k", b"old")])}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0
    try:
        resp = c.request(20, 4, {"topic_names": [name], "timeout_ms": 5000})
        assert resp.responses[0].error_code == 0
    finally:
        c = WireClient(fuzz_broker.bootstrap)
        assert _create(c, name) == 0
        end = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert end.topics[0].partitions[0].offset == 0  # a new topic, not the deleted one's log


def test_topic_name_with_trailing_newline_is_refused(fuzz_broker: BrokerProcess) -> None:
    c = WireClient(fuzz_broker.bootstrap)
    assert _create(c, "nl\n") == ErrorCode.INVALID_TOPIC_EXCEPTION


def _create(c: WireClient, name: str) -> int:
    resp = c.request(19, 5, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout_ms": 5000,
                             "validate_only": False})
    return resp.topics[0].error_code
