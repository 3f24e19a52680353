"""Strict conversion of values a user types: graph arguments (``name:=value``), argument files, node
parameters. A value is accepted only in a form it is documented to have; anything else is an
:class:`ArgumentError` naming the argument and the expected form — never a silent default. (A ``dry_run:=ture``
that quietly meant ``false`` would send commands to an arm.)

ROS-free and dependency-free: the launch graph, the nodes and the CLI share it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from diffpolicy_ros.errors import UserError

TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no")
BOOL_FORM = "true or false (also 1/0, yes/no)"


class ArgumentError(UserError):
    """A typed value that does not have its documented form or domain."""


def parse_bool(value: Any, name: str) -> bool:
    """true/false, 1/0, yes/no (any case), or a bool / the integers 0 and 1; anything else is an error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ArgumentError(f"argument {name}:={value!r}: expected {BOOL_FORM}")


def parse_number(
    value: Any,
    name: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float | int:
    """A finite number (an integer if ``integer``) in [low, high] ((low, high] if ``low_open``)."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool):
        raise ArgumentError(f"argument {name}:={value!r}: expected {kind}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"argument {name}:={value!r}: expected {kind}{domain_text(low, high, low_open)}") from None
    if not math.isfinite(number) or (integer and number != int(number)):
        raise ArgumentError(f"argument {name}:={value!r}: expected {kind}{domain_text(low, high, low_open)}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and number > high
    if too_low or too_high:
        raise ArgumentError(f"argument {name}:={value!r}: expected {kind}{domain_text(low, high, low_open)}")
    return int(number) if integer else number


def domain_text(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" <= {high:g}"
    return ""


def parse_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise ArgumentError(f"argument {name}:={value!r}: expected one of {', '.join(choices)}")
    return value


def parse_point(value: Any, name: str) -> list[float]:
    """'[x, y, z]' or 'x,y,z' -> three finite floats."""
    parts = [p for p in str(value).strip().strip("[]").replace(",", " ").split() if p]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ArgumentError(f"argument {name}:={value!r}: expected three numbers, e.g. {name}:='[0.3, -0.2, 0.05]'")
    return values


DEVICE_PATTERN = re.compile(r"^(auto|cpu|(cuda|npu)(:\d+)?)$")


def parse_device(value: Any, name: str) -> str:
    text = str(value)
    if not DEVICE_PATTERN.match(text):
        raise ArgumentError(f"argument {name}:={value!r}: expected auto, cpu, cuda[:N] or npu[:N]")
    return text


# -- argument kinds: (name, text) -> value, for tables of typed arguments -------------------------------------
Kind = Callable[[str, Any], Any]


def flag(name: str, value: Any) -> bool:
    return parse_bool(value, name)


def text(name: str, value: Any) -> str:
    return "" if value is None else str(value)


def nonempty(name: str, value: Any) -> str:
    if not str(value or "").strip():
        raise ArgumentError(f"argument {name}: must not be empty")
    return str(value)


def topic(name: str, value: Any) -> str:
    value = nonempty(name, value)
    if not re.match(r"^/?[A-Za-z~][A-Za-z0-9_/~{}]*$", value) or "//" in value:
        raise ArgumentError(f"argument {name}:={value!r}: expected a ROS topic name, e.g. /camera/image_raw")
    return value


def device(name: str, value: Any) -> str:
    return parse_device(value, name)


def point(name: str, value: Any) -> list[float] | None:
    """Three numbers, or '' for 'not given'."""
    return parse_point(value, name) if str(value).strip() else None


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Kind:
    return lambda name, value: parse_number(value, name, low=low, high=high, low_open=low_open)


def integer(low: int | None = None, high: int | None = None) -> Kind:
    return lambda name, value: parse_number(value, name, integer=True, low=low, high=high)


def choice(choices: Iterable[str]) -> Kind:
    choices = tuple(choices)
    return lambda name, value: parse_choice(value, name, choices)


def optional(kind: Kind) -> Kind:
    """'' (or None) means 'not given' (None); anything else must be of ``kind``."""
    return lambda name, value: None if value is None or str(value) == "" else kind(name, value)


POSITIVE = number(0, low_open=True)
NON_NEGATIVE = number(0)
