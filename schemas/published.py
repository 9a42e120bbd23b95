"""Other systems' published BEAM numbers (docs/published_results.json, beside the page that
shows them: not in fixtures/, which holds what the stages read), one record each.

Facts about the field, not our measurements: each row says who measured, with which models and
under which protocol, whether that protocol leaks the dataset's annotations to the answerer, and
how far the number was checked against its source.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from schemas.base import Record
from schemas.errors import IntegrityError

PUBLISHED_RESULTS = Path("docs/published_results.json")

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


# ---------------------------------------------------------------------------------------------
# Other systems' per-question files: their ids on ours, and what a rescore or replay records
# ---------------------------------------------------------------------------------------------


def question_id_from_jelly(their_id: str) -> str | None:
    """Jelly's `100K/<N>/<ability>/<index>` as our `conv<N>:<ability>:<index>`; None when the
    id has another shape (counted as unmatched, never guessed)."""
    parts = their_id.split("/")
    if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
        return None
    return f"conv{int(parts[1])}:{parts[2]}:{int(parts[3])}"


def question_id_from_underscored(their_id: str) -> str | None:
    """AMB's `query_id` and past.dev's `questionId`, `<N>_<ability>_<index>`, as ours. Ability
    names hold underscores: the conversation is split off at the first, the index at the last."""
    number, _, rest = their_id.partition("_")
    ability, _, index = rest.rpartition("_")
    if not number.isdigit() or not index.isdigit() or not ability:
        return None
    return f"conv{int(number)}:{ability}:{int(index)}"


class Matching(Record):
    """How a published file's questions met the slice's: every one counted, none dropped."""

    matched: int
    missing: list[str]
    """The slice's questions the file has nothing for (our ids)."""
    outside_slice: int
    """The file's questions with a well-formed id that this mode's slice does not hold (lite and
    full hold 2 and 100 of the 400)."""
    unmatched: list[str]
    """The file's ids that name no question of ours (their ids, as written)."""
    duplicates: list[str]
    """Our ids the file holds more than once (the first is used)."""


class ItemAgreement(Record):
    """Our judge against a published judge on the same answers, one ability (or `overall`)."""

    questions: int
    items: int
    """Rubric items both judges scored (event ordering has none: its row compares question
    scores only)."""
    exact_agreement: float | None
    """Share of items where our score equals theirs as rounded (1, 0.5, 0)."""
    mean_abs_diff: float | None
    """Mean |ours - theirs rounded| over the items."""
    mean_abs_diff_raw: float | None
    """Mean |ours - their raw number| over the items."""
    their_item_mean: float | None
    our_item_mean: float | None
    question_mean_abs_diff: float | None
    """Mean |our question score - theirs| over the questions."""
    not_compared_items: int
    """Items our judge could not score (a failed call or an unusable reply) or whose counts
    differ between the two (left out of the item numbers, counted here)."""


class RescoreRecord(Record):
    """What a rescore measured (`commands/rescore.py`): the label says exactly what."""

    measured: str
    source: str
    source_sha256: dict[str, str]
    mode: str
    judge_model: str
    test_model: bool
    answer_calls: int
    judge_calls: int
    failed_judge_calls: int
    prompt_tokens: int
    completion_tokens: int
    matching: Matching
    score: float | None
    """Mean question score over the matched questions (0..1), by our judge."""
    their_score: float | None
    """Their published mean over the same questions (0..1)."""
    by_ability: dict[str, dict[str, float | int | None]]
    agreement: dict[str, ItemAgreement]


def hash_command(path: Path) -> str:
    """The command that prints a file's sha256, for a person to check the file and pin it."""
    return f"sha256sum {path}"


def check_published_bytes(name: str, pinned_sha256: str | None, path: Path, data: bytes) -> None:
    """Refuse a published file whose hash is not pinned, or not the pinned one (IntegrityError,
    with what to do)."""
    found = hashlib.sha256(data).hexdigest()
    if pinned_sha256 is None:
        raise IntegrityError(
            f"published file {name!r} ({path}) has no sha256 pinned: check the file, print its "
            f"hash with `{hash_command(path)}` and pin it in pins.yaml "
            f"`published.{name}.sha256` (found {found})"
        )
    if found != pinned_sha256:
        raise IntegrityError(
            f"published file {name!r} ({path}) hashes to {found}, but pins.yaml "
            f"`published.{name}.sha256` is {pinned_sha256}: a different or damaged copy; fetch "
            "the pinned commit again"
        )


PUBLISHED_CACHE = Path(".cache/published")
"""Where the fetch stage keeps a published file it downloaded (system replay with no
`replay.file`): `<this>/<repo>/<commit>/<path>`, a cache like the scorer's, its bytes fixed by the
pinned sha256 and checked again on every read."""


def fetched_published_path(repo: str, commit: str, path: str) -> Path:
    return PUBLISHED_CACHE / repo / commit / path
