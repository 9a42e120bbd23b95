"""The repository's params (params.yaml over settings.yaml) with some sections changed, for tests
that run a stage on their own folder: every stage reads them whole into its typed root, so a test
writes them whole, as one params.yaml (with no settings.yaml beside it, all a stage reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stages.common import params_mapping
from tests.conftest import REPO_ROOT


def repo_params() -> dict[str, Any]:
    """The repository's params.yaml over its settings.yaml, as one mapping."""
    return params_mapping(REPO_ROOT / "params.yaml")


def params_with(**changes: Any) -> dict[str, Any]:
    """The repo's params; a section given as a mapping is merged over the repo's (its keys
    replaced), anything else replaces the key."""
    params = repo_params()
    for name, value in changes.items():
        if isinstance(value, dict) and isinstance(params.get(name), dict):
            params[name] = {**params[name], **value}
        else:
            params[name] = value
    return params


def write_params(folder: Path, **changes: Any) -> Path:
    """`params_with(**changes)` as `folder/params.yaml`."""
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params_with(**changes), sort_keys=False), encoding="utf-8")
    return path
