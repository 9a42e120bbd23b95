"""The one base of every record the project writes, reads back or passes between layers."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A frozen pydantic model that refuses unknown fields: a typo in a file or in params is an
    error that names the field, never a value silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)
