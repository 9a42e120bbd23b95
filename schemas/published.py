"""Other systems' published BEAM numbers (fixtures/published_results.json), one record each.

Facts about the field, not our measurements: each row says who measured, with which models and
under which protocol, whether that protocol leaks the dataset's annotations to the answerer, and
how far the number was checked against its source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from schemas.base import Record

PUBLISHED_RESULTS = Path("fixtures/published_results.json")

Verified = Literal["checked", "secondary", "unverified"]
"""checked: read in the source itself at the given commit; secondary: read only where another
party quotes it; unverified: the source could not be reached here (the number is as reported)."""


class PublishedResult(Record):
    """One published BEAM headline."""

    system: str
    tier: str
    """The BEAM tier: 100K, 500K, 1M or 10M."""
    score: float
    """Percent, as published (one run unless `note` says otherwise)."""
    answerer: str | None
    """The answer model; None where the source does not say (or could not be read)."""
    judge: str | None
    protocol: str
    """Whose prompts and scoring produced it (BEAM's own, ExaBase's, AMB's, OmniMemEval's)."""
    leak: bool | None
    """Whether the answer prompt passes the dataset's annotations (rubric hints) to the answerer;
    None where not known."""
    source_url: str
    source_commit: str | None
    verified: Verified
    note: str = ""


class PublishedResults(Record):
    about: str
    results: list[PublishedResult]
