"""`meta.properties`, the file that says which cluster and node a KRaft data directory belongs to (KIP-631,
KIP-858's `directory.id`), and the checks a KRaft node makes of its directories before it starts.

`gregor storage format` writes one, version 1, in every log dir and in the metadata log dir:

    #
    #Written by gregor storage format
    node.id=1
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ
    version=1
    cluster.id=4L6g3nShT-eMCtK--X86sw

A KRaft node refuses to start unless every one of its directories has one, all with the same
`cluster.id` and with its `node.id`: a directory someone forgot to format, or one copied from another
cluster or node, would otherwise join a quorum it does not belong to. ZooKeeper-mode and lone brokers
neither write nor read it here.

Ids are Kafka's: 16 random bytes in URL-safe base64 without padding (22 characters), never starting with
'-' (a command line would take it for an option).
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid
from dataclasses import dataclass

from gregor.metadata.store import MetadataError
from gregor.storage.files import fsync_dir

META_PROPERTIES = "meta.properties"
VERSION = 1


class NotFormattedError(MetadataError):
    """A directory of a KRaft node has no meta.properties, or one that does not fit this node."""


def random_uuid() -> str:
    """A new id in Kafka's text form (kafka-storage.sh random-uuid)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def parse_uuid(text: str, what: str = "cluster id") -> str:
    """`text` if it is an id in Kafka's text form (22 characters of URL-safe base64, 16 bytes), else ValueError."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(text) != 22 or len(raw) != 16 or base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        raise ValueError(f"{what} {text!r} is not a valid id: 16 bytes in URL-safe base64 without padding "
                         "(22 characters), as `gregor storage random-uuid` prints")
    if raw == bytes(16):
        raise ValueError(f"{what} {text!r} is reserved (all zeros)")
    return text


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = VERSION

    def text(self) -> str:
        lines = ["#", "#Written by gregor storage format", f"node.id={self.node_id}"]
        if self.directory_id is not None:
            lines.append(f"directory.id={self.directory_id}")
        lines += [f"version={self.version}", f"cluster.id={self.cluster_id}"]
        return "\n".join(lines) + "\n"


def node_directories(log_dirs: list[str], metadata_log_dir: str | None) -> list[str]:
    """Every directory of a node: its log dirs and its metadata log dir (metadata.log.dir, else the first log
    dir), once each, absolute."""
    dirs = [os.path.abspath(d) for d in log_dirs] + ([os.path.abspath(metadata_log_dir)] if metadata_log_dir else [])
    return list(dict.fromkeys(dirs))


def path_in(directory: str) -> str:
    return os.path.join(directory, META_PROPERTIES)


def read(directory: str) -> MetaProperties | None:
    """The directory's meta.properties; None when it has none. MetadataError when it cannot be read or is
    not a version 1 file with a cluster.id and a node.id."""
    path = path_in(directory)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise MetadataError(f"cannot read {path}: {e}") from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        k, sep, v = s.partition("=")
        if sep:
            props[k.strip()] = v.strip()
    try:
        version = int(props.get("version", "0"))
        if version != VERSION:
            raise ValueError(f"version {version}: a KRaft node needs version 1 (version 0 is a ZooKeeper-mode "
                             "broker's; run gregor migrate zookeeper-to-kraft or gregor storage format)")
        return MetaProperties(props["cluster.id"], int(props["node.id"]), props.get("directory.id"), version)
    except KeyError as e:
        raise MetadataError(f"{path} has no {e.args[0]}") from None
    except ValueError as e:
        raise MetadataError(f"{path}: {e}") from None


def write(directory: str, meta: MetaProperties) -> None:
    """Write it durably: a temporary file, fsynced, renamed into place, the directory fsynced."""
    os.makedirs(directory, exist_ok=True)
    path = path_in(directory)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(meta.text())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def check_formatted(directories: list[str], node_id: int) -> str:
    """The cluster id every one of `directories` was formatted with, for node `node_id`; NotFormattedError
    naming the first directory that is not formatted, or formatted for another cluster or node."""
    cluster_id: str | None = None
    first = ""
    for d in dict.fromkeys(os.path.abspath(x) for x in directories):
        meta = read(d)
        if meta is None:
            raise NotFormattedError(f"No {META_PROPERTIES} found in {d} (have you run `gregor storage format` to "
                                    "format the directory?)")
        if meta.node_id != node_id:
            raise NotFormattedError(
                f"Stored node id {meta.node_id} doesn't match the configured node.id {node_id} in {path_in(d)}. If you "
                "moved your data, make sure your configured node id matches. If you intend to create a new node, "
                "you should remove all data in your data directories.")
        if cluster_id is None:
            cluster_id, first = meta.cluster_id, d
        elif meta.cluster_id != cluster_id:
            raise NotFormattedError(f"Invalid cluster.id in: {path_in(d)}. Expected {cluster_id} (as in "
                                    f"{path_in(first)}), but read {meta.cluster_id}")
    if cluster_id is None:
        raise NotFormattedError("a KRaft node needs at least one directory")
    return cluster_id


def format_directories(directories: list[str], cluster_id: str, node_id: int,
                       ignore_formatted: bool = False) -> list[str]:
    """Write meta.properties (a new directory.id each) in every directory, creating it if missing; returns
    the ones written. A directory already formatted is an error (MetadataError), or skipped with
    `ignore_formatted`; either way one formatted for another cluster is an error."""
    parse_uuid(cluster_id)
    todo: list[str] = []
    for d in dict.fromkeys(os.path.abspath(x) for x in directories):
        meta = read(d)
        if meta is None:
            todo.append(d)
            continue
        if meta.cluster_id != cluster_id:
            raise MetadataError(f"{d} is already formatted for cluster {meta.cluster_id}, not {cluster_id}")
        if not ignore_formatted:
            raise MetadataError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore this "
                                "directory and format the others.")
    for d in todo:
        write(d, MetaProperties(cluster_id, node_id, random_uuid()))
    return todo
