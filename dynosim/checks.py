"""Field validators shared by every config, spec and file reader: one place for each check.

Each raises :class:`~dynosim.errors.ConfigError`, whose message is the one-line contract of the
edge: ``FIELD: got VALUE; allowed: WHAT``. ``name`` is the field as the user wrote it (a dotted
path such as ``engine.max_num_seqs`` or ``FILE: knobs.tp``). Booleans are never numbers here, and
NaN or an infinity is never "a finite number": every comparison is written so that NaN fails it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from dynosim.errors import ConfigError

MAX_SEED = 2**32 - 1
"""Largest seed of a simulation or a study (NumPy's legacy seeding, which some samplers use,
takes 32 bits); here so that ``dynosim simulate`` checks it without importing the study file."""


def bound_text(
    kind: str,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> str:
    """What is allowed, in words: ``an integer in [1, 65,536]``, ``a finite number > 0``."""
    lo = "(" if open_low else "["
    hi = ")" if open_high else "]"
    if low is not None and high is not None:
        return f"{kind} in {lo}{_fmt(low)}, {_fmt(high)}{hi}"
    if low is not None:
        return f"{kind} {'>' if open_low else '>='} {_fmt(low)}"
    if high is not None:
        return f"{kind} {'<' if open_high else '<='} {_fmt(high)}"
    return kind


def _fmt(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def is_number(value: object) -> bool:
    """True for an int a float can hold or a finite float (never a bool, NaN or an infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)  # an int beyond the float range raises OverflowError
    except OverflowError:
        return False


def integer(
    name: str, value: object, low: int | None = None, high: int | None = None, *, why: str = ""
) -> int:
    """``value`` if it is an integer in ``[low, high]`` (either bound may be absent)."""
    ok = not isinstance(value, bool) and isinstance(value, int)
    if ok and ((low is not None and value < low) or (high is not None and value > high)):  # type: ignore[operator]
        ok = False
    if not ok:
        raise ConfigError(name, value, _why(bound_text("an integer", low, high), why))
    return value  # type: ignore[return-value]


def number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    why: str = "",
) -> float:
    """``value`` as a float if it is a finite number within the bounds (open or closed)."""
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if open_low else value >= low  # type: ignore[operator]
    if ok and high is not None:
        ok = value < high if open_high else value <= high  # type: ignore[operator]
    if not ok:
        allowed = bound_text("a finite number", low, high, open_low=open_low, open_high=open_high)
        raise ConfigError(name, value, _why(allowed, why))
    return float(value)  # type: ignore[arg-type]


def choice(name: str, value: object, allowed: Collection[object]) -> Any:
    """``value`` if it is one of ``allowed`` (listed ``a | b | c`` in the message)."""
    if value not in allowed:
        raise ConfigError(name, value, " | ".join(map(str, allowed)))
    return value


def flag(name: str, value: object) -> bool:
    """``value`` if it is a boolean."""
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true | false")
    return value


def text(name: str, value: object) -> str:
    """``value`` if it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigError(name, value, "a non-empty string")
    return value


def mapping(name: str, value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping."""
    if not isinstance(value, Mapping):
        raise ConfigError(name, value, "a mapping")
    return value


def known_keys(name: str, value: object, allowed: Collection[str]) -> Mapping[str, Any]:
    """``value`` if it is a mapping whose every key is in ``allowed``.

    The first unknown key is named as ``name.key`` in the message.
    """
    data = mapping(name, value)
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{name}.{key}" if name else str(key), data[key], ", ".join(allowed))
    return data


def _why(allowed: str, why: str) -> str:
    return f"{allowed} ({why})" if why else allowed
