"""Kafka's `sasl.jaas.config` syntax: login modules with a control flag and key=value options.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

Kafka reads it with Java's StreamTokenizer (JaasConfig): words are letters, digits and `._$-`,
values may be double- or single-quoted with backslash escapes, `//` and `/* */` comments are
skipped, each module ends with `;`. The same rules here, so a property that Kafka accepts is
accepted unchanged and one it rejects is rejected with a message naming what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._$-")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"', "'": "'"}


class JaasConfigError(ValueError):
    """The text is not a valid JAAS configuration; the message says where."""


@dataclass(frozen=True)
class LoginModule:
    """One `Class flag options;` entry."""

    class_name: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) pairs: kind is 'word', 'quoted' or the punctuation character itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise JaasConfigError("unterminated /* comment in JAAS config")
            i = j + 2
        elif c in _WORD_CHARS:
            j = i
            while j < n and text[j] in _WORD_CHARS:
                j += 1
            out.append(("word", text[i:j]))
            i = j
        elif c in "\"'":
            buf: list[str] = []
            j = i + 1
            while True:
                if j >= n:
                    raise JaasConfigError(f"unterminated quoted value starting at offset {i} in JAAS config")
                ch = text[j]
                if ch == c:
                    break
                if ch == "\\" and j + 1 < n:
                    buf.append(_ESCAPES.get(text[j + 1], text[j + 1]))
                    j += 2
                    continue
                buf.append(ch)
                j += 1
            out.append(("quoted", "".join(buf)))
            i = j + 1
        else:
            out.append((c, c))
            i += 1
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """All login modules of a JAAS configuration text. Raises JaasConfigError."""
    toks = _tokens(text)
    modules: list[LoginModule] = []
    i = 0

    def expect_value(what: str) -> str:
        nonlocal i
        if i >= len(toks) or toks[i][0] not in ("word", "quoted"):
            got = toks[i][1] if i < len(toks) else "end of text"
            raise JaasConfigError(f"expected {what} in JAAS config, found {got!r}")
        i += 1
        return toks[i - 1][1]

    while i < len(toks):
        class_name = expect_value("a login module class name")
        flag = expect_value(f"a control flag after {class_name}")
        if flag.lower() not in CONTROL_FLAGS:
            raise JaasConfigError(f"invalid control flag {flag!r} for {class_name} in JAAS config "
                                  f"(expected one of {', '.join(CONTROL_FLAGS)})")
        options: dict[str, str] = {}
        while True:
            if i >= len(toks):
                raise JaasConfigError(f"JAAS config entry for {class_name} does not end with ';'")
            if toks[i][0] == ";":
                i += 1
                break
            key = expect_value("an option name")
            if i >= len(toks) or toks[i][0] != "=":
                raise JaasConfigError(f"expected '=' after option {key!r} of {class_name} in JAAS config")
            i += 1
            options[key] = expect_value(f"a value for option {key!r}")
        modules.append(LoginModule(class_name, flag.lower(), options))
    return modules


def parse_single_module(text: str, prop_name: str = "sasl.jaas.config") -> LoginModule:
    """The one login module a `sasl.jaas.config` property must hold (Kafka rejects more or none)."""
    modules = parse_jaas_config(text)
    if len(modules) != 1:
        raise JaasConfigError(f"JAAS config property {prop_name} contains {len(modules)} login modules, should be 1 module")
    return modules[0]
