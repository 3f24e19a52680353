"""Dataclass configs <-> YAML / plain dicts (plain dicts are what checkpoints store: weights_only-safe)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any] | None) -> T:
    """Build dataclass ``cls`` from a (nested) dict; unknown keys are an error naming the key."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {sorted(unknown)}; valid: {sorted(names)}")
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


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping; ``base: other.yaml`` (relative to this file) is loaded first and this file's keys
    are merged over it, nested mappings key by key, so a variant states only what differs."""
    path = Path(path).resolve()
    if path in _seen:
        raise ValueError(f"{path}: 'base' files form a cycle: {' -> '.join(str(p) for p in (*_seen, path))}")
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level")
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
