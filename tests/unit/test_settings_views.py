"""Every component's typed config view names real broker properties with matching types."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing

import gregor
from gregor.config import BROKER_PROPS, BrokerConfig
from gregor.configdef import Settings

_TYPES = {"int": (int,), "long": (int,), "bool": (bool,), "double": (float, int), "string": (str,), "list": (list,)}


def _import_all() -> None:
    for m in pkgutil.walk_packages(gregor.__path__, "gregor."):
        # pyspark is an extra; gregor.__main__ runs the command line when imported
        if not m.name.startswith(("gregor.spark", "gregor.pipeline", "gregor.__main__")):
            importlib.import_module(m.name)


def test_every_view_names_known_properties_of_its_types() -> None:
    _import_all()
    assert Settings.VIEWS, "no component declares a Settings view"
    for name, view in Settings.VIEWS.items():
        hints = typing.get_type_hints(view)
        for f in dataclasses.fields(view):
            prop = BROKER_PROPS.get(f.metadata["property"])
            assert prop is not None, f"{name}.{f.name}: {f.metadata['property']} is not a broker property"
            allowed = _TYPES[prop.type]
            hint = hints[f.name]
            # A union's members (`int | None`); any other hint stands for itself (`list[str]` holds a list).
            args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
            origins = {typing.get_origin(a) or a for a in args} - {type(None)}
            assert origins & set(allowed), f"{name}.{f.name}: {hint} does not hold a {prop.type} ({prop.name})"
            if prop.default is None:
                assert type(None) in args, f"{name}.{f.name}: {prop.name} may be unset, the field must allow None"


def test_every_view_builds_from_the_defaults() -> None:
    _import_all()
    config = BrokerConfig()
    for view in Settings.VIEWS.values():
        view.from_config(config)
