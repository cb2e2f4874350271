"""Reading the YAML files users write (deployments), with one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise DynosimError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise DynosimError(f"{where}: {problem}") from None
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
