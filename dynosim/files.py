"""Reading the YAML files users write (deployments), with one-line errors that name the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError


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
    return f"{where}: invalid YAML: {getattr(exc, 'problem', None) or 'parse error'}"


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping."""
    p = Path(path)
    text = read_text(p)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DynosimError(yaml_syntax_error(p, exc)) from None
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
