"""The judge check's records that later stages read back: the kinds of calibration case."""

from __future__ import annotations

from typing import Literal, get_args

Kind = Literal["stated", "other_fact", "altered", "empty", "buried"]
"""How a calibration case's answer is built (bench/judge_check/__init__.py says why each label
holds)."""
KINDS: tuple[Kind, ...] = get_args(Kind)
