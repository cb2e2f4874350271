"""Search spaces: knobs with domains and conditions, read from ``spaces/*.yaml``.

A space file is data::

    description: Llama-3.1-8B aggregated serving on H200
    knobs:
      backend: {type: choice, values: [vllm, sglang]}
      tp: {type: choice, values: [1, 2, 4, 8]}
      router: {type: choice, values: [round_robin, kv_aware]}
      kv_router.overlap_weight: {type: float, low: 0.0, high: 2.0, step: 0.25,
                                 when: {router: kv_aware}}
      engine.max_num_seqs: {type: int, low: 16, high: 1024, log: true,
                            grid: [32, 128, 512]}
      engine.gpu_memory_utilization: {type: float, low: 0.8, high: 0.95, step: 0.05}

Knob names are dotted paths into :class:`dynosim.config.DeploymentConfig` fields, of any depth
(``prefill.engine.max_num_batched_tokens``, ``planner.decode.max_workers``); with a ``mode``
knob, scope each mode's fields to it (``tp: {..., when: {mode: agg}}``, ``prefill.tp: {...,
when: {mode: disagg}}``). ``when`` makes a knob exist only when earlier knobs have one of the
given values. ``grid`` lists the values the
grid baseline enumerates when the domain itself is too large or continuous. Knobs are ordered as
written; a condition may only refer to an earlier knob.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dynosim.errors import ConfigError
from dynosim.files import parse_yaml, read_text

Value = str | int | float | bool
Params = dict[str, Value]
"""Knob values of one proposal, keyed by knob name (only the active knobs)."""


def _where(source: str, name: str) -> str:
    return f"{source}: knobs.{name}" if source else f"knobs.{name}"


MAX_KNOB_VALUE = 1e15
"""Largest magnitude of a numeric knob's bounds (every deployment field is far below it)."""
MAX_KNOB_STEPS = 10**9
"""Most grid steps a numeric knob may span."""


def _number(where: str, key: str, value: object, *, integer: bool) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    kind = "an integer" if integer else "a finite number"
    if isinstance(value, bool) or not ok:
        raise ConfigError(f"{where}.{key}", value, f"{kind} in [-1e15, 1e15]")
    if not -MAX_KNOB_VALUE <= value <= MAX_KNOB_VALUE:  # type: ignore[operator]  # NaN fails
        raise ConfigError(f"{where}.{key}", value, f"{kind} in [-1e15, 1e15]")
    return value  # type: ignore[return-value]


def unreadable(field: str) -> Callable[[Path, str], ConfigError]:
    """An error factory for :func:`dynosim.files.read_text` that names the study field."""
    return lambda path, why: ConfigError(field, str(path), f"a readable UTF-8 file ({why})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Knob:
    """One tunable parameter.

    Attributes:
        name: Dotted path into the deployment config, e.g. ``engine.max_num_seqs``.
        kind: ``choice``, ``int`` or ``float``.
        values: The options of a ``choice`` knob.
        low: Lower bound (inclusive) of a numeric knob.
        high: Upper bound (inclusive) of a numeric knob.
        step: Grid step of a numeric knob (``None``: continuous float / unit int step).
        log: Sample on a log scale.
        when: Conditions ``{knob: allowed values}``; all must hold for this knob to exist.
        grid: Values the grid baseline enumerates instead of the whole domain.
    """

    name: str
    kind: str
    values: tuple[Value, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False
    when: tuple[tuple[str, tuple[Value, ...]], ...] = ()
    grid: tuple[Value, ...] | None = None

    def active(self, params: Mapping[str, Value]) -> bool:
        """True when every condition holds for ``params`` (the earlier knobs' values)."""
        return all(k in params and params[k] in allowed for k, allowed in self.when)

    def contains(self, value: object) -> bool:
        """True when ``value`` lies in the domain."""
        if self.kind == "choice":
            return any(_same(value, v) for v in self.values)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not self.low <= value <= self.high:
            return False
        if self.step is None:
            return True
        k = (value - self.low) / self.step
        return abs(k - round(k)) < 1e-9

    def grid_values(self) -> tuple[Value, ...]:
        """The values the grid baseline enumerates, in order.

        Raises:
            ConfigError: A continuous float knob has no ``step`` and no ``grid``.
        """
        if self.grid is not None:
            return self.grid
        if self.kind == "choice":
            return self.values
        if self.kind == "int":
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            raise ConfigError(f"knobs.{self.name}", "continuous", "a step or a grid list")
        n = math.floor((self.high - self.low) / self.step + 1e-9)
        return tuple(round(self.low + i * self.step, 12) for i in range(n + 1))

    def grid_count(self) -> int | None:
        """How many values :meth:`grid_values` has, without making them (None: continuous)."""
        if self.grid is not None:
            return len(self.grid)
        if self.kind == "choice":
            return len(self.values)
        if self.kind == "int":
            return len(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        return math.floor((self.high - self.low) / self.step + 1e-9) + 1

    def sample(self, rng: np.random.Generator) -> Value:
        """One value drawn uniformly (log-uniformly for ``log`` knobs)."""
        if self.kind == "choice":
            return self.values[int(rng.integers(len(self.values)))]
        if self.step is not None:
            n = math.floor((self.high - self.low) / self.step + 1e-9)
            v = self.low + int(rng.integers(n + 1)) * self.step
            return int(v) if self.kind == "int" else round(v, 12)
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = float(rng.uniform(self.low, self.high))
        if self.kind == "int":
            return min(int(self.high), max(int(self.low), round(x)))
        return x


def _same(a: object, b: object) -> bool:
    """Equality that keeps ``True`` apart from ``1``."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


@dataclass(frozen=True, slots=True)
class Space:
    """An ordered set of knobs. ``params`` always hold exactly the active knobs."""

    knobs: tuple[Knob, ...]
    description: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """Knob names in order."""
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        """The knob called ``name``."""
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def sample(self, rng: np.random.Generator) -> Params:
        """A random point: each active knob drawn in order."""
        params: Params = {}
        for k in self.knobs:
            if k.active(params):
                params[k.name] = k.sample(rng)
        return params

    def active_params(self, values: Mapping[str, Any]) -> Params:
        """Keep only the knobs active under ``values`` (a full assignment, e.g. from pymoo)."""
        params: Params = {}
        for k in self.knobs:
            if k.active(params):
                params[k.name] = _plain(values[k.name])
        return params

    def validate(self, params: Mapping[str, Any]) -> None:
        """Check that ``params`` assigns exactly the active knobs, each inside its domain.

        Raises:
            ConfigError: Naming the first offending knob.
        """
        seen: Params = {}
        for k in self.knobs:
            if not k.active(seen):
                if k.name in params:
                    raise ConfigError(k.name, params[k.name], "absent (its condition fails)")
                continue
            if k.name not in params:
                raise ConfigError(k.name, None, "a value (the knob is active)")
            if not k.contains(params[k.name]):
                raise ConfigError(k.name, params[k.name], _domain(k))
            seen[k.name] = params[k.name]
        extra = set(params) - set(self.names)
        if extra:
            name = sorted(extra)[0]
            raise ConfigError(name, params[name], "one of " + ", ".join(self.names))

    def grid(self) -> Iterator[Params]:
        """Every point of the grid, in a fixed order (last knob varies fastest)."""
        yield from self._grid(0, {})

    def _grid(self, i: int, prefix: Params) -> Iterator[Params]:
        if i == len(self.knobs):
            yield dict(prefix)
            return
        k = self.knobs[i]
        if not k.active(prefix):
            yield from self._grid(i + 1, prefix)
            return
        for v in k.grid_values():
            prefix[k.name] = v
            yield from self._grid(i + 1, prefix)
        del prefix[k.name]

    def grid_size(self) -> int:
        """Number of grid points (enumerates; spaces are small enough)."""
        return sum(1 for _ in self.grid())

    def grid_bound(self) -> int | None:
        """An upper bound of :meth:`grid_size`, computed without enumerating (None: no grid)."""
        total = 1
        for k in self.knobs:
            count = k.grid_count()
            if count is None:
                return None
            total *= count
        return total

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Space:
        """Parse the YAML form (see the module docstring).

        Raises:
            ConfigError: One line naming the file and the field.
        """
        where = f"{source}: " if source else ""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}space", data, "a mapping with 'knobs'")
        unknown = set(data) - {"description", "knobs"}
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"{where}{key}", data[key], "description | knobs")
        raw = data.get("knobs")
        if not isinstance(raw, Mapping) or not raw:
            raise ConfigError(f"{where}knobs", raw, "a non-empty mapping of knob name to domain")
        knobs: list[Knob] = []
        for name, spec in raw.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(_where(source, str(name)), name, "a deployment field path")
            knobs.append(_parse_knob(name, spec, knobs, source))
        _check_live(knobs, source)
        return cls(tuple(knobs), str(data.get("description", "")))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Space:
        """Read and validate a space file."""
        p = Path(path)
        try:
            data = parse_yaml(read_text(p, unreadable("space")))
        except yaml.YAMLError as exc:
            raise ConfigError(str(p), "YAML", f"valid YAML ({yaml_error(exc)})") from None
        return cls.from_dict(data, str(p))


def yaml_error(exc: yaml.YAMLError) -> str:
    """A short description of a YAML parse error with its line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "parse error"
    return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)


def _domain(k: Knob) -> str:
    if k.kind == "choice":
        return " | ".join(map(str, k.values))
    step = f" step {k.step}" if k.step else ""
    return f"{'an integer' if k.kind == 'int' else 'a number'} in [{k.low}, {k.high}]{step}"


_KEYS = {
    "choice": {"type", "values", "when", "grid"},
    "int": {"type", "low", "high", "step", "log", "when", "grid"},
    "float": {"type", "low", "high", "step", "log", "when", "grid"},
}


def _parse_knob(name: str, spec: object, earlier: Sequence[Knob], source: str) -> Knob:
    where = _where(source, name)
    if not isinstance(spec, Mapping):
        raise ConfigError(where, spec, "a mapping with 'type'")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise ConfigError(f"{where}.type", kind, "choice | int | float")
    unknown = set(spec) - _KEYS[kind]
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"{where}.{key}", spec[key], " | ".join(sorted(_KEYS[kind])))
    when = _parse_when(where, spec.get("when", {}), earlier)
    grid = spec.get("grid")
    if grid is not None and (not isinstance(grid, list) or not grid):
        raise ConfigError(f"{where}.grid", grid, "a non-empty list of values")
    if kind == "choice":
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.values", values, "a non-empty list")
        for v in values:
            if not isinstance(v, str | int | float | bool) or (
                isinstance(v, float) and not math.isfinite(v)
            ):
                raise ConfigError(f"{where}.values", v, "strings, finite numbers or booleans")
        if len({(type(v), v) for v in values}) != len(values):
            raise ConfigError(f"{where}.values", values, "distinct values")
        knob = Knob(name=name, kind="choice", values=tuple(values), when=when)
    else:
        knob = _numeric(name, kind, spec, where, when)
    if grid is not None:
        for v in grid:
            if not knob.contains(v):
                raise ConfigError(f"{where}.grid", v, _domain(knob))
        knob = dataclasses.replace(knob, grid=tuple(grid))
    return knob


def _numeric(name: str, kind: str, spec: Mapping[str, Any], where: str, when: Any) -> Knob:
    integer = kind == "int"
    low = _number(where, "low", spec.get("low"), integer=integer)
    high = _number(where, "high", spec.get("high"), integer=integer)
    if low > high:
        raise ConfigError(f"{where}.high", high, f"a value >= low ({low})")
    step = spec.get("step")
    if step is not None:
        step = _number(where, "step", step, integer=integer)
        if step <= 0:
            raise ConfigError(f"{where}.step", step, "a positive number")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log", log, "true | false")
    if (step is not None or (integer and not log)) and (high - low) / (step or 1) > MAX_KNOB_STEPS:
        why = f"at most {MAX_KNOB_STEPS:,} steps of {step or 1} from low ({low}) to high"
        raise ConfigError(f"{where}.high", high, why)
    if log and low <= 0:
        raise ConfigError(f"{where}.low", low, "a positive number (log scale)")
    if log and step is not None and not (integer and step == 1):
        raise ConfigError(f"{where}.step", step, "no step with log: true")
    if log and integer:
        step = None
    return Knob(name=name, kind=kind, low=low, high=high, step=step, log=log, when=when)


def _parse_when(where: str, raw: object, earlier: Sequence[Knob]) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}.when", raw, "a mapping {knob: value or [values]}")
    by_name = {k.name: k for k in earlier}
    out = []
    for key, allowed in raw.items():
        other = by_name.get(key) if isinstance(key, str) else None
        if other is None:
            raise ConfigError(f"{where}.when.{key}", allowed, "an earlier knob")
        vals = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if not vals:
            raise ConfigError(f"{where}.when.{key}", allowed, "a value or a non-empty list")
        for v in vals:
            if not other.contains(v):  # a typo, or a knob that can never be active
                raise ConfigError(f"{where}.when.{key}", v, f"a value of {key}: {_domain(other)}")
        out.append((key, vals))
    return tuple(out)


_OTHER = object()
"""Stands for "any value no condition names" in :func:`_check_live`."""
_LIVE_SEARCH_LIMIT = 100_000


def _check_live(knobs: Sequence[Knob], source: str) -> None:
    """Refuse a knob whose conditions can never hold together (a dead knob).

    Walks the assignments of the knobs that conditions name, one representative per value a
    condition names plus one for every other value; gives up quietly on huge spaces.
    """
    named: dict[str, list[Value]] = {}
    for k in knobs:
        for key, allowed in k.when:
            values = named.setdefault(key, [])
            values.extend(v for v in allowed if not any(_same(v, w) for w in values))
    live: set[str] = set()
    budget = [_LIVE_SEARCH_LIMIT]

    def walk(i: int, params: dict[str, object]) -> None:
        if budget[0] <= 0 or len(live) == len(knobs):
            return
        budget[0] -= 1
        if i == len(knobs):
            return
        k = knobs[i]
        if not k.active(params):  # type: ignore[arg-type]
            walk(i + 1, params)
            return
        live.add(k.name)
        if k.name not in named:
            walk(i + 1, params)
            return
        for v in _representatives(k, named[k.name]):
            params[k.name] = v
            walk(i + 1, params)
        del params[k.name]

    walk(0, {})
    if budget[0] <= 0:
        return
    for k in knobs:
        if k.name not in live:
            conditions = {key: list(v) for key, v in k.when}
            why = "conditions that can hold together (as written, this knob is never active)"
            raise ConfigError(f"{_where(source, k.name)}.when", conditions, why)


def _representatives(k: Knob, named: Sequence[Value]) -> list[object]:
    """The named values in ``k``'s domain, plus :data:`_OTHER` if it has further values."""
    inside = [v for v in named if k.contains(v)]
    count = dataclasses.replace(k, grid=None).grid_count()  # the whole domain's size
    more = count is None or count > len(inside)
    return [*inside, _OTHER] if more else list(inside)


def _plain(value: Any) -> Value:
    """Convert numpy scalars (as pymoo hands them out) to plain Python values."""
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    return value  # type: ignore[no-any-return]
