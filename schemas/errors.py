"""The project's own error types: what every stage raises when it must stop a run."""

from __future__ import annotations


class BeamError(Exception):
    """A failure a user can act on: the message says what was expected, what was found, and what
    to do. Stage entry points turn it into a one-paragraph message and `exit_code`."""

    exit_code = 2


class ParamsError(BeamError):
    """params.yaml (or a fixture) does not match its schema."""


class IntegrityError(BeamError):
    """A pinned file, hash or fixture does not match what was found."""


class DataError(BeamError):
    """The dataset is missing a column, a conversation or a message the stage needs."""


class FetchError(BeamError):
    """A pinned download could not be made."""


class ServiceError(BeamError):
    """An outside service (Neo4j, a model endpoint) could not be started or reached."""


class BudgetError(BeamError):
    """A stage would cross the mode's spend cap."""


class ModelFailures(BeamError):
    """More of a stage's model calls failed after their retries than its params tolerate. The
    stage leaves no outputs (DVC must not lock a partial result); the calls that did finish are
    cached, so running it again repeats only the failed ones. Exit code 3 tells a retrying
    script that running again may help, where 2 needs a change first."""

    exit_code = 3


def check_failed_share(
    stage: str,
    what: str,
    failed: int,
    total: int,
    tolerated_share: float,
    last_error: str | None,
) -> None:
    """Raise ModelFailures when `failed` of `total` items is more than `tolerated_share` of them.

    `what` names the items ("extraction calls", "questions"); the message carries the counts,
    the last error and what to do."""
    if failed == 0 or failed <= tolerated_share * total:
        return
    raise ModelFailures(
        f"{stage}: {failed} of {total} {what} failed after retries "
        f"(last error: {last_error or 'unknown'}). Run `dvc repro` again: finished calls are "
        f"cached and only the failed ones are repeated. To accept partial results instead, set "
        f"{stage}.max_failed_share in params.yaml (now {tolerated_share:g}); the failures are "
        "then reported beside the score."
    )
