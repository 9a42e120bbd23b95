"""The repository's params.yaml with some sections changed, for tests that run a stage on their
own folder: every stage reads the whole file into its typed root, so a test writes whole params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO_ROOT


def params_with(**changes: Any) -> dict[str, Any]:
    """The repo's params; a section given as a mapping is merged over the repo's (its keys
    replaced), anything else replaces the key."""
    params: dict[str, Any] = yaml.safe_load((REPO_ROOT / "params.yaml").read_text("utf-8"))
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
