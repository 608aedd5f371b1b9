"""How a config is defined: name, type, default, bounds, documentation, update mode (Kafka's ConfigDef).

One `Prop` describes one property, and parsing, validation and display all go through it, so a
value accepted in one place (a CreateTopics request, server.properties) is accepted everywhere
else (log loading, DescribeConfigs). This module is a leaf: the broker's table (gregor.config)
and the topic-config table (gregor.storage.config) both build on it, and it imports neither.

Components do not read the broker's config by string key: each declares the properties it uses as a
`Settings` view (a frozen dataclass of typed fields, each naming its property), built from the one
table, so a reader sees what a component depends on and a misspelt name fails when the view is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# Kafka's update modes of a broker property (its docs' "Update Mode").
READ_ONLY = "read-only"  # takes effect on restart only
PER_BROKER = "per-broker"  # may be altered for one broker at a time
CLUSTER_WIDE = "cluster-wide"  # may be altered as a cluster-wide default (or per broker, for testing)
MODES = (READ_ONLY, PER_BROKER, CLUSTER_WIDE)

TYPES = ("int", "long", "bool", "double", "string", "list")
_RANGES = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}


class ConfigError(ValueError):
    """A property is unknown, ill-typed or out of range. The message names the property."""


def _number_text(v: float) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 2**63 else str(v)


@dataclass(frozen=True)
class Prop:
    """One property. `type` is 'int' (32-bit), 'long' (64-bit), 'bool', 'double', 'string' or 'list'
    (comma-separated); `lo`/`hi` bound numbers (inclusive), `choices` bound strings and list items;
    a None default means "unset" (a finer or coarser synonym decides). `mode` is Kafka's update mode."""

    name: str
    type: str
    default: Any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    doc: str = ""
    mode: str = READ_ONLY
    sensitive: bool = False  # Kafka's PASSWORD type: never shown by DescribeConfigs or in logs

    def __post_init__(self) -> None:
        assert self.type in TYPES, f"{self.name}: unknown type {self.type}"
        assert self.mode in MODES, f"{self.name}: unknown update mode {self.mode}"
        if self.default is not None:
            self.check(self.default)  # a default outside its own bounds is a bug in the table

    def _invalid(self, value: Any, why: str) -> ConfigError:
        shown = ",".join(value) if isinstance(value, list) else value
        return ConfigError(f"Invalid value {shown} for configuration {self.name}: {why}")

    def parse(self, raw: Any) -> Any:
        """A value from text (or an already typed value) to its type, checked against the bounds.
        None stays None (unset). Raises ConfigError naming the property."""
        if raw is None:
            return None
        t = self.type
        text = raw if isinstance(raw, str) else None
        if t in ("int", "long"):
            if isinstance(raw, bool) or (text is None and not isinstance(raw, int)):
                raise self._invalid(raw, f"Expected value to be a {'32' if t == 'int' else '64'}-bit integer")
            try:
                if text is not None and "_" in text:  # Python's int() reads 1_000; Kafka does not
                    raise ValueError(text)
                v: Any = int(text.strip()) if text is not None else raw
            except ValueError:
                raise self._invalid(raw, f"Expected value to be a {'32' if t == 'int' else '64'}-bit integer") from None
        elif t == "bool":
            if isinstance(raw, bool):
                v = raw
            elif text is not None and text.strip().lower() in ("true", "false"):
                v = text.strip().lower() == "true"
            else:
                raise self._invalid(raw, "Expected value to be either true or false")
        elif t == "double":
            if isinstance(raw, bool):
                raise self._invalid(raw, "Expected value to be a number")
            try:
                if text is not None and "_" in text:
                    raise ValueError(text)
                v = float(text.strip() if text is not None else raw)
            except (TypeError, ValueError):
                raise self._invalid(raw, "Expected value to be a number") from None
        elif t == "list":
            items = raw if isinstance(raw, list) else str(raw).split(",")
            v = [str(x).strip() for x in items if str(x).strip()]
        else:
            v = str(raw).strip()
        self.check(v)
        return v

    def check(self, v: Any) -> None:
        """Check an already typed value against the type's range, the bounds and the choices."""
        t = self.type
        if t in _RANGES:
            if isinstance(v, bool) or not isinstance(v, int):
                raise self._invalid(v, f"Expected value to be a {'32' if t == 'int' else '64'}-bit integer")
            lo, hi = _RANGES[t]
            if not lo <= v <= hi:
                raise self._invalid(v, f"Value must be in [{lo}, {hi}] (a {'32' if t == 'int' else '64'}-bit integer)")
        elif t == "double":
            if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
                raise self._invalid(v, "Expected value to be a number")
        elif t == "bool":
            if not isinstance(v, bool):
                raise self._invalid(v, "Expected value to be either true or false")
        elif t == "list":
            if not isinstance(v, list):
                raise self._invalid(v, "Expected a comma-separated list")
        elif not isinstance(v, str):
            raise self._invalid(v, "Expected a string")
        if self.lo is not None and v < self.lo:
            raise self._invalid(v, f"Value must be at least {_number_text(self.lo)}")
        if self.hi is not None and v > self.hi:
            raise self._invalid(v, f"Value must be no more than {_number_text(self.hi)}")
        if self.choices is not None:
            values = v if isinstance(v, list) else [v]
            if t == "list" and not values:
                raise self._invalid(v, f"Value must list at least one of {', '.join(self.choices)}")
            for x in values:
                if x not in self.choices:
                    raise self._invalid(v, f"String must be one of: {', '.join(self.choices)}")

    def describe_bounds(self) -> str:
        """The valid values, as Kafka's docs show them ("[14,...]", "[delete, compact]")."""
        if self.choices is not None:
            return "[" + ", ".join(self.choices) + "]"
        if self.lo is None and self.hi is None:
            return ""
        lo = "" if self.lo is None else _number_text(self.lo) + ","
        hi = "" if self.hi is None else "," + _number_text(self.hi)
        return f"[{lo}...{hi}]"


def format_value(v: Any) -> str:
    """A config value as Kafka's admin APIs show it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(v)
    if isinstance(v, float):
        return repr(v)  # 0.5, 1.0, inf: what float() reads back
    return str(v)


class PropertySource(Protocol):
    """What typed views are built from: BrokerConfig, or the dynamic configs layered over it."""

    def get(self, name: str) -> Any: ...


def setting(name: str) -> Any:
    """A field of a Settings view, read from the broker property `name`."""
    return dataclasses.field(metadata={"property": name})


class Settings:
    """Base of a component's typed view of the broker's properties.

    A subclass is a frozen dataclass whose fields each say which property they hold:

        @dataclass(frozen=True, slots=True)
        class FetcherSettings(Settings):
            fetch_max_bytes: int = setting("replica.fetch.max.bytes")

    `from_config(config)` builds it from BrokerConfig (or, for dynamic properties, from the dynamic configs
    over it: the owner builds a new view and hands it to the component when they change). Every subclass is
    listed in `VIEWS`, so one unit test checks every declared name and type against the broker's table.
    """

    VIEWS: ClassVar[dict[str, type[Settings]]] = {}  # "module.Class" -> the class

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # dataclass(slots=True) makes a second class of the same name: the last one is the one in use.
        Settings.VIEWS[f"{cls.__module__}.{cls.__qualname__}"] = cls

    @classmethod
    def properties(cls) -> dict[str, str]:
        """field name -> property name."""
        return {f.name: f.metadata["property"] for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def from_config(cls, config: PropertySource) -> Self:
        return cls(**{field: config.get(prop) for field, prop in cls.properties().items()})
