"""What the peers' adapters share: the error a failed call raises inside the peer's code, and the
answer stage's query embedding estimate (one request per question)."""

from __future__ import annotations

from collections.abc import Sequence

from clients.tokens import count_tokens
from schemas.estimate import RoleEstimate
from schemas.records import Question


class ModelCallFailed(Exception):
    """A call through the door failed after its retries (raised inside the peer, caught by its
    adapter, which fails the build or the question)."""


def query_embedding_estimate(questions: Sequence[Question]) -> RoleEstimate:
    """One embedding request per question, its tokens the question's."""
    return RoleEstimate(len(questions), sum(count_tokens(q.question) for q in questions), 0)
