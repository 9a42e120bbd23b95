"""The project's own error types: what every stage raises when it must stop a run."""

from __future__ import annotations


class BeamError(Exception):
    """A failure a user can act on: the message says what was expected, what was found, and what
    to do. Stage entry points turn it into a one-paragraph message and exit code 2."""


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
