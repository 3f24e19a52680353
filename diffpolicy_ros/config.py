"""Dataclass configs <-> YAML / plain dicts (plain dicts are what checkpoints store: weights_only-safe), and
configs that check themselves.

A config class lists the domain of each numeric field in ``DOMAINS`` and derives from :class:`Checked`: every
assignment — construction, ``dataclasses.replace``, a CLI or node override, a test's ``cfg.x = ...`` — is
checked, so ``eval_every: 0`` is an error naming the field when it is set, not a ``ZeroDivisionError`` an hour
into a run.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

from diffpolicy_ros.arguments import DEVICE_PATTERN, domain_text
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.user_files import FileKind, UserFileError, check_input

T = TypeVar("T")


class ConfigError(UserError):
    """A config file or value a run cannot use; the message names the file or the field."""


@dataclasses.dataclass(frozen=True)
class Domain:
    """Where a numeric field may lie: [low, high] ((low, high] when ``low_open``), an integer if ``integer``,
    and None too when ``optional``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    optional: bool = False

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        kind = "an integer" if self.integer else "a number"
        expected = f"expected {kind}{domain_text(self.low, self.high, self.low_open)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return expected
        if self.integer and value != int(value):
            return expected
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return expected
        if self.high is not None and value > self.high:
            return expected
        return None


COUNT = Domain(1, integer=True)  # how many: at least one
NON_NEGATIVE_INT = Domain(0, integer=True)
POSITIVE = Domain(0, low_open=True)
NON_NEGATIVE = Domain(0)
FRACTION = Domain(0, 1)  # [0, 1]
OPEN_FRACTION = Domain(0, 1, low_open=True)  # (0, 1]


class Checked:
    """Mixin for config dataclasses: each assignment to a field named in ``DOMAINS`` is checked, and a
    ``device`` field must be auto, cpu, cuda[:N] or npu[:N]."""

    DOMAINS: ClassVar[dict[str, Domain]] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        domain = self.DOMAINS.get(name)
        problem = domain.problem(value) if domain is not None else None
        if name == "device" and not DEVICE_PATTERN.match(str(value)):
            problem = "expected auto, cpu, cuda[:N] or npu[:N]"
        if problem:
            raise ConfigError(f"{type(self).__name__}.{name} = {value!r}: {problem}")
        super().__setattr__(name, value)


def override(config: T, **values: Any) -> T:
    """A copy of ``config`` with the given fields replaced; ``None`` means 'not given' (keeps the field).
    Goes through construction, so every check runs again."""
    return dataclasses.replace(config, **{k: v for k, v in values.items() if v is not None})


def from_dict(cls: type[T], data: dict[str, Any] | None) -> T:
    """Build dataclass ``cls`` from a (nested) dict; an unknown key or a value of the wrong type is an error
    naming the field."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown option(s) {sorted(unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for key, value in data.items():
        hint = hints[key]
        expected = type_problem(value, hint)
        if expected:
            raise ConfigError(f"{cls.__name__}.{key} = {value!r}: expected {expected}")
        if dataclasses.is_dataclass(hint):
            value = from_dict(hint, value)
        elif typing.get_origin(hint) is tuple:
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
               list: "a list"}  # fmt: skip


def type_problem(value: Any, hint: Any) -> str | None:
    """What a YAML value for a field annotated ``hint`` should have been (None: it is one). Numbers' domains are
    :class:`Checked`'s; this catches the value of another type (``gamma: high``, ``train: 5``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        problems = [type_problem(value, option) for option in options]
        return None if None in problems else " or ".join(p for p in problems if p)
    if hint is type(None):
        return None if value is None else "nothing (null)"
    if dataclasses.is_dataclass(hint):
        return None if isinstance(value, dict) else f"a mapping of {[f.name for f in dataclasses.fields(hint)]}"
    base = origin or hint
    if base is tuple:
        return None if isinstance(value, (list, tuple)) else "a list"
    if base is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if base is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if base in _TYPE_WORDS:
        return None if isinstance(value, base) else _TYPE_WORDS[base]
    return None  # Any, or a type YAML cannot spell: its own checks apply


def to_dict(config: Any) -> dict[str, Any]:
    """Plain-python dict (lists instead of tuples) of a dataclass config."""

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(config))


def read_yaml_mapping(path: str | Path, kind: FileKind, label: str | None = None) -> dict[str, Any]:
    """The mapping in a YAML file of ``kind``: a missing, empty or unreadable file, bad YAML, a file with no
    settings or anything but a mapping is a ConfigError that starts with ``label`` (default: the kind and the
    path; how the caller's user knows the file: "argument config:=X", ...)."""
    label = label or f"{kind.name} {path}"
    try:
        file = check_input(path, kind)
        text = file.read_text()
    except UserFileError as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}: cannot be read as text ({type(exc).__name__})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{label}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        raise ConfigError(f"{label}: holds no settings (only comments or blank lines){kind.hint()}")
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a YAML mapping (name: value lines) at the top level{kind.hint()}")
    return data


def load_yaml(path: str | Path, kind: FileKind, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping; ``base: other.yaml`` (relative to this file) is loaded first and this file's keys
    are merged over it, nested mappings key by key, so a variant states only what differs."""
    resolved = Path(path).expanduser().resolve()
    if resolved in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, resolved))
        raise ConfigError(f"{kind.name} {path}: 'base' files form a cycle: {chain}")
    data = read_yaml_mapping(path, kind)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{kind.name} {path}: base = {base!r}: expected the path of another {kind.name}")
    return merge(load_yaml(resolved.parent / base, kind, (*_seen, resolved)), data)


def load_config(cls: type[T], path: str | Path, kind: FileKind, required: tuple[str, ...] = ()) -> T:
    """Dataclass ``cls`` from a YAML file of ``kind`` (``base:`` merged); a key in ``required`` must be given
    (a default there would silently change what runs), and every error names the file."""
    data = load_yaml(path, kind)
    for key in required:
        if key not in data:
            raise ConfigError(f"{kind.name} {path}: no '{key}' key{kind.hint()}")
    try:
        return from_dict(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"{kind.name} {path}: {exc}") from None


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: nested dicts merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
