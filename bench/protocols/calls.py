"""The protocols' judge calls over the judge model, and one protocol's questions scored
`concurrency` at a time (each question's calls in sequence, as its protocol makes them)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from bench.judge import JudgeModel
from bench.protocols.base import ProtocolAsk
from bench.scoring import usable_reply
from clients.llm.port import ChatRequest
from schemas.protocols import ProtocolQuestion
from schemas.records import Question


class ProtocolCalls:
    """`ask` over the judge model, safe from several threads; counts the calls without a usable
    reply (a failed call, one cut at max_tokens), which the protocol then scores as its code
    does."""

    def __init__(self, model: JudgeModel) -> None:
        self.model = model
        self._lock = threading.Lock()
        self.calls = 0
        self.failures: list[str] = []

    def ask(self, request: ChatRequest) -> str | None:
        reply, failure = usable_reply(self.model.complete(request))
        with self._lock:
            self.calls += 1
            if failure is not None:
                self.failures.append(failure)
        return reply


def judge_all(
    questions: Sequence[Question],
    judge_one: Callable[[Question, ProtocolAsk], ProtocolQuestion],
    ask: ProtocolAsk,
    *,
    concurrency: int,
) -> list[ProtocolQuestion]:
    """`judge_one` of every question, in question order, `concurrency` questions at a time. A
    protocol's calls depend only on the question and the replies, so the outs are the same at
    any concurrency."""
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="beam-protocol") as pool:
        return list(pool.map(lambda q: judge_one(q, ask), questions))
