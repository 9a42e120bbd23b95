"""How a record becomes the bytes of a file: JSON with sorted keys and rounded floats, so an
unchanged result is a byte-identical file (and a slice's pinned sha256 can be computed before it
is written)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

FLOAT_DIGITS = 6


def _round_floats(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, FLOAT_DIGITS)
    if isinstance(value, Mapping):
        return {str(k): _round_floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_round_floats(v) for v in value]
    return value


def stable_json(value: Any) -> str:
    """JSON with sorted keys and rounded floats: an unchanged result is a byte-identical file."""
    return json.dumps(_round_floats(value), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


R = TypeVar("R", bound=BaseModel)


def rounded(record: R) -> R:
    """The record as `stable_json` writes it (floats rounded), without a file between: what a
    reader of the file gets back, for a stage that shows what it wrote."""
    return type(record).model_validate(_round_floats(record.model_dump(mode="json")))
