"""A KRaft quorum's bootstrap records: what its first active controller writes into the empty metadata log.

A formatted quorum starts from its feature levels alone (gregor.controller.quorum_controller's
`default_bootstrap`). A quorum formatted by `gregor migrate zookeeper-to-kraft` starts from the whole
ZooKeeper cluster's metadata instead, and that is too much to pass on a command line: the migration
leaves it in `<metadata.log.dir>/bootstrap.checkpoint` (Kafka's name for the same file), on every
controller, and whichever of them is elected first writes it, once, as one atomic batch, when the log
holds no metadata.version yet. Later elections find it written and ignore the file.

The file is one record batch in Kafka's v2 format: the records as the metadata log holds them (encoded
by gregor.metadata.kraft_records), a CRC-32C over the batch, written to a temporary file, fsynced and
renamed, so a reader sees all of it or none; a torn or altered file is refused at start, naming it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from gregor.metadata.store import MetadataError
from gregor.protocol.records import compute_crc
from gregor.raft import records as rr
from gregor.raft.accumulator import MAX_BATCH_BYTES
from gregor.storage.files import fsync_dir

BOOTSTRAP_FILE = "bootstrap.checkpoint"


def path_in(directory: str) -> str:
    return os.path.join(directory, BOOTSTRAP_FILE)


def write(directory: str, values: Sequence[bytes]) -> str:
    """Write the encoded records durably as `directory`'s bootstrap file; its path. MetadataError if they
    do not fit one batch of the metadata log (the first controller appends them atomically)."""
    need = rr.batch_overhead() + sum(rr.record_overhead(len(v)) for v in values)
    if need > MAX_BATCH_BYTES:
        raise MetadataError(f"the bootstrap records take {need} bytes, more than one metadata log batch holds "
                            f"({MAX_BATCH_BYTES}): the cluster's metadata is too large to migrate in one step")
    batch = rr.data_batch(list(values), 0, 0, int(time.time() * 1000))
    os.makedirs(directory, exist_ok=True)
    path = path_in(directory)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(batch)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)
    return path


def read(directory: str) -> list[bytes] | None:
    """The encoded records of `directory`'s bootstrap file; None when it has none. MetadataError when the
    file is torn or altered."""
    path = path_in(directory)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BATCH_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise MetadataError(f"cannot read {path}: {e}") from None
    try:
        headers = rr.headers_of(data)
        if len(headers) != 1 or headers[0].size != len(data):
            raise ValueError(f"{len(headers)} whole batches in {len(data)} bytes, expected exactly one")
        if compute_crc(data, 0, headers[0].size) != headers[0].crc:
            raise ValueError("its CRC does not match its contents")
        batch = rr.decode_batch(data, headers[0])
    except Exception as e:  # any decoding failure: the file is not what the migration wrote
        raise MetadataError(f"{path} is damaged ({e}): run the migration again, or remove it to start the quorum "
                            "empty") from None
    return list(batch.records or [])
