"""The judge's questions on threads (bench/judge.py `judge_questions`, `JudgeCalls`): the
event-ordering questions' equivalence calls overlap across questions, and the outcome is a serial
run's: the same judgements, the same calls (each distinct message sent once, even when two
questions ask it at the same moment), the same failures in the same order, and an error in one
question stops the run.

The model is a fake that answers after a short sleep by the scripted model's own equivalence rule
(bench/scripted_rules.py) and records every request with the number in flight when it started.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from bench.judge import JudgeCalls, judge_question, judge_questions
from bench.scripted_rules import equivalence_rule
from clients.llm.port import ChatRequest, Completion
from schemas.errors import BudgetError
from schemas.judging import Judgement, JudgePrompts
from schemas.records import Question, Rubric
from tests.support import scorer_standin as standin

EVENTS = [
    ["signed the lease", "painted the kitchen", "moved into the flat", "hosted a party"],
    ["booked the flight", "renewed the passport", "packed the bags"],
    ["adopted a puppy", "bought a crate", "hired a trainer", "entered a dog show", "won a ribbon"],
]


class SlowJudge:
    """Answers equivalence requests after `seconds` by the scripted rule; a request whose prompt
    holds a word of `fail_on` fails (a Completion with `error` naming the word), one holding a
    word of `raise_on` raises BudgetError. Thread-safe; keeps every request and the most in
    flight at once."""

    def __init__(
        self,
        seconds: float,
        *,
        fail_on: Sequence[str] = (),
        raise_on: Sequence[str] = (),
        delay: Callable[[str], float] | None = None,
    ) -> None:
        self.seconds = seconds
        self.fail_on = fail_on
        self.raise_on = raise_on
        self.delay = delay
        self.requests: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest) -> Completion:
        prompt = "\n".join(m.content or "" for m in request.messages)
        with self._lock:
            self.requests.append(prompt)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay(prompt) if self.delay is not None else self.seconds)
            for word in self.raise_on:
                if word in prompt:
                    raise BudgetError(f"the cap is reached at {word}")
            for word in self.fail_on:
                if word in prompt:
                    return Completion(error=f"HTTP 500 on {word}", failure="transport", model="f")
            reply = equivalence_rule(request)
            return Completion(text=reply.text, model="fake/judge", prompt_tokens=7)
        finally:
            with self._lock:
                self.in_flight -= 1

    def run_batch(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return [self.complete(r) for r in requests]


@pytest.fixture(scope="module")
def prompts() -> JudgePrompts:
    from bench.scorer_prompts import extract_judge_prompts

    return extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())


def event_question(number: int, events: list[str]) -> tuple[Question, Rubric]:
    qid = f"conv{number}:event_ordering:0"
    question = Question(
        id=qid,
        conversation_id=str(number),
        ability="event_ordering",
        index=0,
        question="In what order did these happen?",
    )
    return question, Rubric(
        question_id=qid, ability="event_ordering", rubric=events, source_chat_ids=[1]
    )


# Answers that make the alignment search: lines out of order, lines matching nothing, a repeat.
CASES: list[tuple[list[str], str]] = [
    (EVENTS[0], "1. hosted a party\n2. signed the lease\n3. painted the kitchen\n4. a walk"),
    (EVENTS[1], "- packed the bags\n- booked the flight"),
    (EVENTS[2], "won a ribbon\nbought a crate\nadopted a puppy\nhired a trainer\nthe vet"),
    (EVENTS[0], "1. hosted a party\n2. signed the lease\n3. painted the kitchen\n4. a walk"),
    (EVENTS[1], "booked the flight\nrenewed the passport\npacked the bags"),
    (EVENTS[2], "entered a dog show\nadopted a puppy\nwon a ribbon"),
]
"""The fourth repeats the first: its equivalence messages are the first's, sent once."""


def run(
    model: SlowJudge,
    prompts: JudgePrompts,
    concurrency: int,
    cases: list[tuple[list[str], str]] = CASES,
    cap: int | None = None,
) -> tuple[list[Judgement], list[str]]:
    pairs = {q.id: (q, r, a) for n, (e, a) in enumerate(cases) for q, r in [event_question(n, e)]}
    calls = JudgeCalls(model, prompts)

    def judge_one(question: Question, ask: Callable[..., str | None]) -> Judgement:
        _, rubric, answer = pairs[question.id]
        return judge_question(question, rubric, answer, prompts, ask, max_equivalence_calls=cap)

    questions = [q for q, _, _ in pairs.values()]
    judged = list(judge_questions(questions, judge_one, calls, concurrency=concurrency))
    return judged, calls.failures


def test_equivalence_calls_overlap_across_questions_with_a_serial_runs_outcome(
    prompts: JudgePrompts,
) -> None:
    serial_model, threaded_model = SlowJudge(0.02), SlowJudge(0.02)
    started = time.monotonic()
    serial, serial_failures = run(serial_model, prompts, concurrency=1)
    serial_seconds = time.monotonic() - started
    started = time.monotonic()
    threaded, threaded_failures = run(threaded_model, prompts, concurrency=6)
    threaded_seconds = time.monotonic() - started

    assert serial_model.max_in_flight == 1
    assert 1 < threaded_model.max_in_flight <= 6  # several questions' calls at once, within c
    assert threaded_seconds < serial_seconds
    assert [j.model_dump() for j in threaded] == [j.model_dump() for j in serial]
    assert Counter(threaded_model.requests) == Counter(serial_model.requests)
    assert serial_failures == threaded_failures == []
    # each distinct message sent once: the repeated question (and the pairs the questions on the
    # same events share) sent nothing again
    assert len(serial_model.requests) == len(set(serial_model.requests))
    assert serial[3].calls == serial[0].calls > 0
    assert len(serial_model.requests) <= sum(j.calls for j in serial) - serial[3].calls


def test_the_cap_holds_per_question_at_any_concurrency(prompts: JudgePrompts) -> None:
    serial, _ = run(SlowJudge(0.005), prompts, concurrency=1, cap=4)
    threaded, _ = run(SlowJudge(0.005), prompts, concurrency=6, cap=4)
    assert [j.model_dump() for j in threaded] == [j.model_dump() for j in serial]
    assert all(j.calls <= 4 for j in serial)
    assert any("call_cap_reached" in j.flags for j in serial)


def test_a_message_two_questions_ask_at_once_is_sent_once(prompts: JudgePrompts) -> None:
    model = SlowJudge(0.3)  # long enough that both threads ask before the first reply
    same = [(EVENTS[1], "booked the flight")] * 2
    judged, _ = run(model, prompts, concurrency=2, cases=same)
    assert len(model.requests) == 1
    assert model.max_in_flight == 1
    assert judged[0].event == judged[1].event and judged[0].calls == judged[1].calls == 1


def test_failures_keep_a_serial_runs_order_whatever_finishes_first(prompts: JudgePrompts) -> None:
    """The first question's failing call is made slowly, the second's fast: on threads the second
    fails first in time, yet `failures` lists them in question order, as a serial run does."""
    cases = [(EVENTS[0], "hosted a party"), (EVENTS[1], "packed the bags")]

    def delay(prompt: str) -> float:
        return 0.3 if "signed the lease" in prompt else 0.0

    fail_on = ("signed the lease", "booked the flight")
    serial, serial_failures = run(SlowJudge(0, fail_on=fail_on, delay=delay), prompts, 1, cases)
    threaded, failures = run(SlowJudge(0, fail_on=fail_on, delay=delay), prompts, 2, cases)
    assert serial_failures == ["HTTP 500 on signed the lease", "HTTP 500 on booked the flight"]
    assert failures == serial_failures
    assert [j.model_dump() for j in threaded] == [j.model_dump() for j in serial]
    assert all("model_error" in j.flags for j in serial)


def test_an_error_in_one_question_stops_the_run(prompts: JudgePrompts) -> None:
    model = SlowJudge(0.01, raise_on=("won a ribbon",))
    with pytest.raises(BudgetError, match="won a ribbon"):
        run(model, prompts, concurrency=3)
