"""Random sequences of log operations checked against a simple model of the partition."""

from __future__ import annotations

import random

import pytest

from gregor.storage import Log, LogConfig, OffsetOutOfRangeError
from tests.storage.util import append, headers_in, read_all


@pytest.mark.parametrize("seed", range(6))
def test_random_operations(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=rng.choice([400, 1000, 3000]), index_interval_bytes=rng.choice([0, 100, 700]),
                       retention_bytes=rng.choice([-1, 2500]), retention_ms=-1, file_delete_delay_ms=0)
    log = Log.open(str(tmp_path / "rand-0"), config, now_ms=0)
    batches: list[tuple[int, int, bytes]] = []  # (first, last, value) of every batch in the model
    log_start = 0
    for step in range(300):
        op = rng.random()
        if op < 0.45:
            n = rng.randint(1, 4)
            value = f"{seed}-{step}".encode()
            info = append(log, n, value=value, ts=step, epoch=step // 50)
            assert info.first_offset == (batches[-1][1] + 1 if batches else log_start)
            batches.append((info.first_offset, info.last_offset, value))
        elif op < 0.55:
            log.update_high_watermark(rng.randint(log_start, log.log_end_offset))
        elif op < 0.62 and log.high_watermark > log_start:
            target = rng.randint(log_start, log.high_watermark)
            log_start = log.delete_records(target)
            assert log_start == target
        elif op < 0.68:
            candidates = [b[0] for b in batches if b[0] >= log_start]
            if candidates:
                x = rng.choice(candidates)
                assert log.truncate_to(x)
                batches = [b for b in batches if b[1] < x]
                assert log.log_end_offset == x
        elif op < 0.74:
            log.delete_old_segments(now_ms=step)
            log_start = log.log_start_offset
        elif op < 0.80:
            log.flush() if rng.random() < 0.5 else log.maybe_flush(step)
        elif op < 0.86:
            hw = log.high_watermark
            clean = rng.random() < 0.5
            if clean:
                log.flush()
            rp = log.recovery_point
            log.close()
            log = Log.open(log.dir, config, recovery_point=rp, log_start_offset=log_start, now_ms=step, clean_shutdown=clean)
            log.update_high_watermark(hw)
        else:
            if log.log_end_offset > log_start:
                offset = rng.randint(log_start, log.log_end_offset - 1)
                info = log.read(offset, rng.randint(0, 2000), max_offset=rng.choice([None, log.high_watermark]))
                hs = headers_in(info.records)
                if hs:
                    assert hs[0].base_offset <= offset <= hs[-1].last_offset or hs[0].base_offset > offset
            with pytest.raises(OffsetOutOfRangeError):
                log.read(log.log_end_offset + 1, 100)
        # invariants and contents after every step
        assert log.log_start_offset == log_start
        assert log_start <= log.high_watermark <= log.log_end_offset
        assert log.recovery_point <= log.log_end_offset
        want = [(o, v) for first, last, v in batches for o in range(first, last + 1) if o >= log_start]
        assert [(r.offset, r.value) for r in read_all(log)] == want
        assert log.log_end_offset == (batches[-1][1] + 1 if batches and batches[-1][1] >= log_start else
                                      max(log_start, log.log_end_offset))
    log.close()
