"""Workers a group test started and did not wait for (it failed first) are killed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.groups.common import STARTED


@pytest.fixture(autouse=True)
def _kill_leftover_workers() -> Iterator[None]:
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
