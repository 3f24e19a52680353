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
import typing
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

from diffpolicy_ros.arguments import DEVICE_PATTERN, domain_text
from diffpolicy_ros.errors import UserError

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
    """Build dataclass ``cls`` from a (nested) dict; unknown keys are an error naming the key."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown option(s) {sorted(unknown)}; valid: {sorted(names)}")
    kwargs = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint) and isinstance(value, dict):
            value = from_dict(hint, value)
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


def to_dict(config: Any) -> dict[str, Any]:
    """Plain-python dict (lists instead of tuples) of a dataclass config."""

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(config))


def read_yaml_mapping(path: str | Path, name: str) -> dict[str, Any]:
    """The mapping in a YAML file (empty file: {}); a missing file, bad YAML or anything but a mapping is a
    ConfigError that starts with ``name`` (how the caller's user knows the file: "argument config:=X", ...)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{name}: no such file")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML ({exc})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a YAML mapping at the top level")
    return data


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping; ``base: other.yaml`` (relative to this file) is loaded first and this file's keys
    are merged over it, nested mappings key by key, so a variant states only what differs."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"{path}: 'base' files form a cycle: {' -> '.join(str(p) for p in (*_seen, path))}")
    data = read_yaml_mapping(path, f"config file {path}")
    base = data.pop("base", None)
    if base is None:
        return data
    return merge(load_yaml(path.parent / str(base), (*_seen, path)), data)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: nested dicts merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
