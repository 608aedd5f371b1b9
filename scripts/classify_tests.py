"""Which test modules are unit tests: run them with tests/unit's guard (tests/unit_guard.py) on every test,
and print for each module whether it stayed off the network and started no process, and how long it took.

    .venv/bin/python scripts/classify_tests.py [PYTEST-ARGS]    # default: every module outside tests/unit

- `unit`: every test passed with the guard on: no socket connected or bound, no process started, no
  librdkafka client built. Such a module can move to tests/unit as it is.
- `integration`: a test connected, bound or started a process (the first such call is named), or built a
  confluent-kafka client (librdkafka's sockets are its own, not the interpreter's, so the guard cannot see
  them: its client classes are watched here instead).
- `failed`: a test failed for another reason (the first error is shown): look before moving it.

The guard stops a broker, a ZooKeeper or a Spark session at its start, so the integration modules fail
fast; the run takes about as long as the unit modules do. `--timeout 60` bounds a test that retries.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's gregor and tests


@dataclass
class Module:
    seconds: float = 0.0
    tests: int = 0
    passed: int = 0
    skipped: int = 0
    isolation: str = ""  # the first guarded call seen
    librdkafka: str = ""  # the first test that built a confluent-kafka client
    error: str = ""  # the first other failure
    tests_seen: set[str] = field(default_factory=set)

    def kind(self) -> str:
        if self.isolation or self.librdkafka:
            return "integration"
        if self.error:
            return "failed"
        return "unit" if self.passed else "skipped"


class Classifier:
    def __init__(self) -> None:
        self.modules: dict[str, Module] = {}
        self.current: str | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        import confluent_kafka
        import confluent_kafka.admin

        def watched(cls: type) -> type:
            classifier = self

            class Watched(cls):  # type: ignore[valid-type, misc]
                def __init__(self, *args: object, **kwargs: object) -> None:
                    if classifier.current is not None:
                        m = classifier.module(classifier.current)
                        m.librdkafka = m.librdkafka or f"{classifier.current} built a {cls.__name__}"
                    super().__init__(*args, **kwargs)

            Watched.__name__ = Watched.__qualname__ = cls.__name__
            return Watched

        for mod in (confluent_kafka, confluent_kafka.admin):
            for name in ("Producer", "Consumer", "AdminClient"):
                if hasattr(mod, name):
                    setattr(mod, name, watched(getattr(mod, name)))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            item.add_marker(pytest.mark.unit)  # tests/conftest.py guards every test marked unit

    def module(self, nodeid: str) -> Module:
        return self.modules.setdefault(nodeid.split("::", 1)[0], Module())

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current = nodeid

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        m = self.module(report.nodeid)
        m.seconds += report.duration
        if report.nodeid not in m.tests_seen:
            m.tests_seen.add(report.nodeid)
            m.tests += 1
        if report.when == "call" and report.passed:
            m.passed += 1
        if report.skipped:
            m.skipped += 1
        if report.failed:
            text = str(report.longrepr)
            if "IsolationError" in text:
                line = next((ln for ln in text.splitlines() if "IsolationError: " in ln), "IsolationError")
                m.isolation = m.isolation or line.split("IsolationError: ", 1)[-1].split(": unit tests (tests/unit)")[0][:160]
            else:
                m.error = m.error or f"{report.nodeid.split('::', 1)[-1]}: {text.splitlines()[-1][:160]}"


def main(argv: list[str]) -> int:
    args = argv or [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").iterdir())
                    if p.is_dir() and p.name not in ("unit", "__pycache__")] + \
        [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))]
    os.chdir(ROOT)
    classifier = Classifier()
    t0 = time.monotonic()
    pytest.main(["-q", "-p", "no:cacheprovider", "--timeout", "60", "--tb=line", "-rN", *args], plugins=[classifier])
    print(f"\n{len(classifier.modules)} modules in {time.monotonic() - t0:.0f} s\n")
    print("| module | kind | tests | seconds | why |")
    print("| --- | --- | --- | --- | --- |")
    order = {"unit": 0, "failed": 1, "skipped": 2, "integration": 3}
    for name, m in sorted(classifier.modules.items(), key=lambda kv: (order[kv[1].kind()], kv[0])):
        why = m.isolation or m.librdkafka or m.error
        print(f"| {name} | {m.kind()} | {m.tests} | {m.seconds:.2f} | {why.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
