"""Reading the YAML files users write, with one-line errors that name the file.

Every YAML file (deployments, workloads, spaces, studies) is parsed by :func:`parse_yaml`: YAML
restricted to what JSON can hold (strings, numbers, booleans, null, lists, mappings), where a
key given twice in one mapping is an error instead of the last one silently winning.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError

MAX_YAML_DEPTH = 64
"""Deepest nesting of lists and mappings a YAML file may have."""
MAX_YAML_VALUES = 1_000_000
"""Most values a YAML file may hold once its aliases are expanded."""
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
)


if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:  # libyaml's parser when present: the same results, several times faster
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(_SafeLoader):
    """A safe loader for JSON-like YAML that refuses duplicate keys and exotic types.

    Dates stay strings (as JSON has no date type); ``!!binary``, ``!!set``, ``!!timestamp``,
    ``!!omap`` and ``!!pairs`` are refused; a key repeated in one mapping is refused with both
    lines.
    """

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        """Like SafeLoader's, but a key given twice in the mapping is a ConstructorError."""
        if isinstance(node, yaml.MappingNode):
            first: dict[Hashable, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, Hashable):
                    continue  # SafeLoader reports the unhashable key
                line = key_node.start_mark.line + 1
                if key in first:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first given on line {first[key]})",
                        key_node.start_mark,
                    )
                first[key] = line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]
        return mapping


def _refuse_tag(loader: Any, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        f"tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not supported "
        "(use strings, numbers, booleans, lists and mappings)",
        node.start_mark,
    )


StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeLoader.yaml_implicit_resolvers.items()
}
for _tag in ("binary", "set", "timestamp", "omap", "pairs"):
    StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)
StrictLoader.add_constructor(None, _refuse_tag)  # unknown tags


def _cannot_read(path: Path, reason: str) -> DynosimError:
    return DynosimError(f"{path}: cannot read: {reason}")


def read_text(path: str | Path, error: Callable[[Path, str], DynosimError] = _cannot_read) -> str:
    """A UTF-8 text file's contents.

    Raises:
        DynosimError: ``error(path, reason)`` when the file is missing, unreadable or binary.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise error(p, "not UTF-8 text") from None
    except OSError as exc:
        raise error(p, str(exc.strerror or exc)) from None


def yaml_syntax_error(path: Path, exc: yaml.YAMLError) -> str:
    """One line ``FILE:LINE: invalid YAML: problem`` for a YAML parse error."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc) or "parse error"
    return f"{where}: invalid YAML: {' '.join(str(problem).split())}"


class YAMLValueError(yaml.YAMLError):
    """A YAML document that parses but holds what no dynosim file may (too deep, too big...)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def parse_yaml(text: str) -> Any:
    """Parse JSON-like YAML text (see :class:`StrictLoader`).

    Raises:
        yaml.YAMLError: Invalid YAML, a duplicate key, an unsupported tag, a number Python
            cannot hold, or a document nested deeper than ``MAX_YAML_DEPTH`` or holding more
            than ``MAX_YAML_VALUES`` values.
    """
    try:
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass
    except RecursionError:
        raise YAMLValueError(f"nested deeper than {MAX_YAML_DEPTH} levels") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4300 digits
        why = " ".join(str(exc).split(";")[0].split())
        raise YAMLValueError(f"a value Python cannot hold: {why}") from None
    _check_size(data)
    return data


def _check_size(data: Any) -> None:
    """Refuse documents too deep or too large (aliases can make a small file huge)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            raise YAMLValueError(f"more than {MAX_YAML_VALUES:,} values (aliases expanded)")
        if isinstance(value, dict | list):
            if depth >= MAX_YAML_DEPTH:
                raise YAMLValueError(f"nested deeper than {MAX_YAML_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def read_yaml(path: str | Path, error: Callable[[Path, str], DynosimError] = _cannot_read) -> Any:
    """Read and parse a YAML file.

    Raises:
        DynosimError: ``error(path, reason)`` when the file cannot be read, or
            ``FILE:LINE: invalid YAML: problem`` (duplicate keys included).
    """
    p = Path(path)
    text = read_text(p, error)
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        raise DynosimError(yaml_syntax_error(p, exc)) from None


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping."""
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise DynosimError(f"{p}: expected a mapping of fields, got {type(data).__name__}")
    return data


def load_deployment(path: str | Path) -> DeploymentConfig:
    """Read and validate a deployment YAML file."""
    data = read_yaml_mapping(path)
    try:
        return DeploymentConfig.from_dict(data)
    except ConfigError as exc:
        raise DynosimError(f"{path}: {exc}") from None
    except TypeError as exc:
        raise DynosimError(f"{path}: {exc}") from None
