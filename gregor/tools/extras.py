"""What a command needs beyond a lone broker's dependencies, and the one command that installs it.

`./quickstart.sh` installs the broker only (scripts/install.sh broker). The commands that need more say
so before they start, with the exact install command, instead of failing half-way with an ImportError:
`gregor cluster up` needs ZooKeeper, a Java runtime and kazoo (`scripts/install.sh cluster`); the
pipeline's commands need PySpark and a Java runtime (`scripts/install.sh spark`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from gregor.tools.common import ToolError
from gregor.tools.local_zookeeper import ZOOKEEPER_JARS

CLUSTER = "cluster"
SPARK = "spark"

# The Python packages of each extra (pyproject.toml's optional-dependencies), by import name.
_MODULES = {CLUSTER: ("kazoo",), SPARK: ("pyspark", "pyarrow", "pandas", "fastavro", "aiohttp")}
# What scripts/install.sh installs for each, and the same by hand outside a checkout.
_INSTALLS = {CLUSTER: ("ZooKeeper and a Java runtime from Debian, and kazoo",
                       "apt-get install zookeeper default-jre-headless; pip install 'gregor[cluster]'"),
             SPARK: ("a Java runtime from Debian, and pyspark, pyarrow, pandas and the typed codecs (gregor[typed])",
                     "apt-get install openjdk-17-jre-headless; pip install 'gregor[spark]'")}


def missing(extra: str) -> list[str]:
    """What `extra` needs that is not installed here (empty when everything is)."""
    out = [name for name in _MODULES[extra] if not _importable(name)]
    if shutil.which("java") is None:
        out.append("a Java runtime")
    if extra == CLUSTER and not os.path.exists(ZOOKEEPER_JARS[0]):
        out.append("ZooKeeper")
    return out


def require(extra: str, command: str) -> None:
    """Raise a ToolError naming what `command` lacks and the command that installs it, if anything is missing."""
    lacking = missing(extra)
    if lacking:
        what, by_hand = _INSTALLS[extra]
        raise ToolError(f"{command} needs {', '.join(lacking)}, not installed here. In the Gregor checkout, "
                        f"scripts/install.sh {extra} installs it ({what}); elsewhere: {by_hand}")


def _importable(name: str) -> bool:
    """Found without importing it (pyspark takes a second to import)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False
