"""Reading params.yaml: one section validated into its typed params, or the mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import BaseModel, ValidationError

from schemas.errors import ParamsError
from schemas.params import MODES, Mode

ROOT = Path(__file__).resolve().parent.parent
PARAMS_FILE = "params.yaml"

M = TypeVar("M", bound=BaseModel)


def read_params_file(path: Path | None = None) -> dict[str, Any]:
    """The whole params.yaml as a mapping (the working directory's, as DVC runs stages there)."""
    path = path or Path(PARAMS_FILE)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ParamsError(f"{path} not found: run stages from the repository root") from exc
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ParamsError(f"{path} must hold a mapping of sections, found {type(data).__name__}")
    return data


def validate_section(name: str, raw: object, model: type[M], *, source: str = PARAMS_FILE) -> M:
    """Validate one params section, re-raising pydantic's error as a ParamsError naming it."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ParamsError(f"{source}: section '{name}' is invalid: {problems}") from exc


def load_params(section: str, model: type[M], path: Path | None = None) -> M:
    """One section of params.yaml, validated by its pydantic model."""
    data = read_params_file(path)
    if section not in data:
        raise ParamsError(f"{path or PARAMS_FILE}: section '{section}' is missing")
    return validate_section(section, data[section], model, source=str(path or PARAMS_FILE))


def load_mode(path: Path | None = None) -> Mode:
    """The top-level `mode` (lite, full or all)."""
    mode = read_params_file(path).get("mode")
    if mode not in MODES:
        raise ParamsError(
            f"params.yaml: mode must be one of {', '.join(map(repr, MODES))}, found {mode!r}"
        )
    return cast(Mode, mode)
