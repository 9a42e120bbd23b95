"""What the peers' adapters share: the error a failed call raises inside the peer's code, and
the shape of their estimates (the build's extraction and embedding requests, one query
embedding and one answer call per question)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from clients.llm.port import ChatRequest
from clients.tokens import count_tokens
from schemas.estimate import RoleEstimate
from schemas.records import Question
from schemas.roles import Role


class ModelCallFailed(Exception):
    """A call through the door failed after its retries (raised inside the peer, caught by its
    adapter, which fails the build or the question)."""


def query_embedding_estimate(questions: Sequence[Question]) -> RoleEstimate:
    """One embedding request per question, its tokens the question's."""
    return RoleEstimate(len(questions), sum(count_tokens(q.question) for q in questions), 0)


def build_estimate(
    extraction: RoleEstimate, embed_calls: int, embed_tokens: int
) -> dict[Role, RoleEstimate]:
    """A peer's build: its extraction calls, and its embedding requests (no completion)."""
    return {
        "extraction": extraction,
        "embedding": RoleEstimate(embed_calls, embed_tokens, 0),
    }


def answer_estimate(
    questions: Sequence[Question],
    request_of: Callable[[Question], ChatRequest],
    shown_tokens: Mapping[str, float],
    completion_tokens_per_call: float,
) -> RoleEstimate:
    """One call per question: the tokens of its request's messages (`request_of`: the peer's
    prompt without what memory shows) plus what memory shows in its conversation
    (`shown_tokens`, by conversation id; 0 where absent)."""
    prompt = 0
    for question in questions:
        request = request_of(question)
        prompt += count_tokens("\n".join(m.content or "" for m in request.messages))
        prompt += round(shown_tokens.get(question.conversation_id, 0.0))
    calls = len(questions)
    return RoleEstimate(calls, prompt, round(calls * completion_tokens_per_call))
