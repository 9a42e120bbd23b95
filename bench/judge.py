"""judge: score each answer against its rubric with the benchmark's own scorer prompts.

Produces one `Judgement` per question and the judge's summary (`summarize`). Every model call
goes through an injected `ask(messages) -> str | None` (None: no usable reply), so the scoring
runs offline; `JudgeCalls` is that `ask` over a real model, as the judge stage runs it, and
`judge_questions` judges questions concurrently with the outcome of a serial run. The parts:

- bench/scorer_prompts.py: the scorer's prompts from the benchmark's pinned files, filled per call;
- bench/scoring.py: one rubric item's verdict from a reply (the top-level verdict only);
- bench/event_order.py: event-ordering alignment and its scores;
- here: the requests, the calls, one question's judgement, the summary.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, TypeVar

from bench.event_order import EVENT_ORDERING, score_event_ordering
from bench.scorer_prompts import Message, equivalence_messages, item_messages
from bench.scoring import JudgeVerdict, parse_equivalence_reply, score_item, usable_reply
from clients.llm.port import ChatRequest, Completion
from clients.llm.port import Message as LlmMessage
from schemas.errors import DataError
from schemas.judging import (
    BEAM_CODE,
    FLAGS,
    EventAlignment,
    EventScores,
    Flag,
    ItemScore,
    JudgedQuestion,
    JudgeGroup,
    Judgement,
    JudgeOverall,
    JudgePrompts,
    JudgeSummary,
    QuestionFlag,
)
from schemas.records import ABILITIES, Question, Rubric

T = TypeVar("T")

Ask = Callable[[list[Message]], str | None]
"""One judge-model call: the reply text, or None when there is no usable reply (the call failed
after its own retries, the reply was unusable, or it was cut at max_tokens)."""

JUDGE_TASK = "judge"
EQUIVALENCE_TASK = "equivalence"


# ---------------------------------------------------------------------------------------------
# Requests and calls
# ---------------------------------------------------------------------------------------------


def item_request(messages: list[Message], prompts: JudgePrompts) -> ChatRequest:
    """One rubric item's verdict (also the judge check's, bench/judge_check/). The reply is
    validated as JudgeVerdict, whose schema carries the score as an enum (a server that turns the
    schema into a grammar keeps even a small model to 1, 0.5 or 0); the benchmark's prompt asks
    for that JSON itself, so no schema text is added to it. `messages` are filled from `prompts`,
    whose version the request carries."""
    return ChatRequest(
        messages=tuple(LlmMessage.model_validate(m) for m in messages),
        task=JUDGE_TASK,
        prompt_version=prompts.version,
        schema=JudgeVerdict,
        instruct_schema=False,
    )


def equivalence_request(messages: list[Message], prompts: JudgePrompts) -> ChatRequest:
    """One equivalence question of the event-ordering alignment (a free-text yes/no reply)."""
    return ChatRequest(
        messages=tuple(LlmMessage.model_validate(m) for m in messages),
        task=EQUIVALENCE_TASK,
        prompt_version=prompts.version,
        instruct_schema=False,
    )


def messages_key(messages: list[Message]) -> str:
    return json.dumps(messages, sort_keys=True)


class JudgeModel(Protocol):
    """What the calls need of the judge model (clients.llm.client.LlmClient, bench.usage's
    CountedModel)."""

    def complete(self, request: ChatRequest) -> Completion: ...

    def run_batch(self, requests: Sequence[ChatRequest]) -> list[Completion]: ...


class JudgeCalls:
    """`ask` over a judge model, safe to call from several threads. The rubric items of a run
    are independent, so they are sent up front as one concurrent batch (`send_items`); any
    message not sent as an item is sent as an equivalence request when asked (`judge_questions`
    asks from a thread per question). Each distinct message is sent once: a second asker, even
    one asking while the first call is in flight, waits for that reply. A completion with no
    usable reply (a failed call, an unusable reply, one cut at max_tokens) answers None and is
    counted in `failures` (the stage's failed calls)."""

    def __init__(self, model: JudgeModel, prompts: JudgePrompts) -> None:
        self.model = model
        self.prompts = prompts
        """The prompts the asked messages are filled from: the requests carry their version."""
        self._lock = threading.Lock()
        self._replies: dict[str, str | None] = {}
        self._in_flight: dict[str, Future[str | None]] = {}
        self._failure_of: dict[str, str] = {}
        self._first_asked: dict[str, tuple[int, int]] = {}
        """Per message, where a serial run would send it: (question rank, ask number) of its
        first asker; the items are rank -1, asked in batch order."""
        self._late_asks = itertools.count()

    @property
    def failures(self) -> list[str]:
        """Why each failed call had no reply, in the order a serial run makes the calls (items in
        batch order, then each question's asks in question order), whatever the threads' timing."""
        with self._lock:
            failed = sorted(self._failure_of, key=self._first_asked.__getitem__)
            return [self._failure_of[key] for key in failed]

    def _keep(self, key: str, completion: Completion) -> str | None:
        reply, failure = usable_reply(completion)
        with self._lock:
            self._replies[key] = reply
            if failure is not None:
                self._failure_of[key] = failure
        return reply

    def send_items(self, batch: Sequence[list[Message]]) -> None:
        keys = [messages_key(m) for m in batch]
        with self._lock:
            for number, key in enumerate(keys):
                self._first_asked.setdefault(key, (-1, number))
        completions = self.model.run_batch([item_request(m, self.prompts) for m in batch])
        for key, completion in zip(keys, completions, strict=True):
            self._keep(key, completion)

    def asker(self, rank: int) -> Ask:
        """`ask` for the question at `rank` in question order (its asks numbered in order), so
        that `failures` keeps a serial run's order."""
        numbers = itertools.count()
        return lambda messages: self._ask(messages, (rank, next(numbers)))

    def ask(self, messages: list[Message]) -> str | None:
        """`ask` outside any question's rank: ordered after every ranked ask, in call order."""
        return self._ask(messages, (sys.maxsize, next(self._late_asks)))

    def _ask(self, messages: list[Message], position: tuple[int, int]) -> str | None:
        key = messages_key(messages)
        with self._lock:
            self._first_asked[key] = min(self._first_asked.get(key, position), position)
            if key in self._replies:
                return self._replies[key]
            waiting = self._in_flight.get(key)
            if waiting is None:
                self._in_flight[key] = Future()
        if waiting is not None:
            return waiting.result()  # the same message, asked by another question just now
        return self._send(key, messages)

    def _send(self, key: str, messages: list[Message]) -> str | None:
        """The one call for `key` (registered in flight by the caller); its waiters get its
        reply, or its exception."""
        with self._lock:
            mine = self._in_flight[key]
        try:
            reply = self._keep(
                key, self.model.complete(equivalence_request(messages, self.prompts))
            )
        except BaseException as exc:  # the budget, a dead endpoint: every waiter stops too
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._in_flight[key]
        mine.set_result(reply)
        return reply


def judge_questions(
    questions: Sequence[Question],
    judge_one: Callable[[Question, Ask], T],
    calls: JudgeCalls,
    *,
    concurrency: int,
) -> Iterator[T]:
    """`judge_one` of every question, yielded in question order, `concurrency` questions at a
    time on threads, each asking through its own `calls.asker`. Within a question the calls stay
    in sequence: the event-ordering alignment (bench/event_order.py `align_events`) picks each
    next pair from the verdicts so far (a matched event is used up, a match ends the line's
    search), so its calls are not known ahead; across questions nothing is shared but the
    replies. Which calls are made, their replies and the per-question cap
    (`judge.max_equivalence_calls`) are therefore the same at any concurrency, and so is every
    out; only the timing differs."""
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="beam-judge") as pool:
        futures = [
            pool.submit(judge_one, question, calls.asker(rank))
            for rank, question in enumerate(questions)
        ]
        try:
            for future in futures:
                yield future.result()
        except BaseException:
            # the budget, a dead endpoint, Ctrl-C: judge no further question
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def evidence_recall(source_chat_ids: Sequence[int], reached: Sequence[int]) -> float | None:
    """Share of the answer's source messages that the agent's tool results reached (None when
    the question has no source messages, as for abstention)."""
    wanted = set(source_chat_ids)
    if not wanted:
        return None
    return len(wanted & set(reached)) / len(wanted)


def judged_question(
    judgement: Judgement,
    source_chat_ids: Sequence[int],
    reached_message_ids: Sequence[int],
    *,
    answer_failed: bool,
    score_beam_code: float,
) -> JudgedQuestion:
    """A question's row: its judgement's scores and flags (`error` where its answer failed), the
    evidence its answer's context reached and what the benchmark's code scores."""
    flags: list[QuestionFlag] = [*judgement.flags]
    if answer_failed:
        flags.append("error")
    return JudgedQuestion(
        question_id=judgement.question_id,
        ability=judgement.ability,
        score=judgement.score,
        score_excluding_known_bad=judgement.score_excluding_known_bad,
        flags=flags,
        evidence_recall=evidence_recall(source_chat_ids, reached_message_ids),
        judge_calls=judgement.calls,
        score_beam_code=score_beam_code,
    )


# ---------------------------------------------------------------------------------------------
# One question
# ---------------------------------------------------------------------------------------------


def judge_question(
    question: Question,
    rubric: Rubric,
    answer: str,
    prompts: JudgePrompts,
    ask: Ask,
    *,
    max_equivalence_calls: int | None = None,
    answer_error: str | None = None,
) -> Judgement:
    """Score one answer. Rubric abilities: one judge call per item, score = mean item score.
    event_ordering: the equivalence alignment only (item i scores 1 when some line matched it),
    score = event_f1 × event_tau_norm. `ask` must return None rather than raise on failure.
    An answer that failed (`answer_error`: the system's call failed, or its reply was cut at
    max_tokens) is never scored from what it left: every item scores 0 without a judge call."""
    if rubric.question_id != question.id or rubric.ability != question.ability:
        raise DataError(
            f"rubric {rubric.question_id} ({rubric.ability}) was paired with question "
            f"{question.id} ({question.ability}); the rubrics and questions files are out of step"
        )
    if not rubric.rubric:
        raise DataError(f"question {question.id} has an empty rubric; nothing to judge it by")
    flags: set[Flag] = set()
    if rubric.known_bad_rubric:
        flags.add("known_bad_rubric")

    event: EventAlignment | None = None
    if answer_error is not None:
        answer = ""  # a fragment is no answer
    if answer_error is not None and question.ability != EVENT_ORDERING:
        items = [
            ItemScore(rubric_item=item, score=0.0, error=f"not judged: {answer_error}")
            for item in rubric.rubric
        ]
        calls, score = 0, 0.0
    elif question.ability == EVENT_ORDERING:

        def are_equivalent(line: str, reference_event: str) -> bool | None:
            reply = ask(equivalence_messages(prompts, reference_event, line))
            return None if reply is None else parse_equivalence_reply(reply)

        event = score_event_ordering(
            rubric.rubric, answer, are_equivalent, max_calls=max_equivalence_calls
        )
        matched_line = {m: k for k, m in enumerate(event.matches) if m is not None}
        items = [
            ItemScore(
                rubric_item=text,
                score=1.0 if index in matched_line else 0.0,
                reason=(
                    f"matched answer line {matched_line[index] + 1}"
                    if index in matched_line
                    else "no answer line matched"
                ),
            )
            for index, text in enumerate(rubric.rubric)
        ]
        calls = event.calls
        score = event.f1 * event.tau_norm
        if event.failed_calls:
            flags.add("model_error")
        if event.capped:
            flags.add("call_cap_reached")
    else:
        items = [
            score_item(item, ask(item_messages(prompts, question.question, item, answer)))
            for item in rubric.rubric
        ]
        calls = len(items)
        score = sum(i.score for i in items) / len(items)
        if any(i.parse_error for i in items):
            flags.add("parse_error")
        if any(i.error is not None and not i.parse_error for i in items):
            flags.add("model_error")
    return Judgement(
        question_id=question.id,
        ability=question.ability,
        items=items,
        score=score,
        score_excluding_known_bad=None if rubric.known_bad_rubric else score,
        event=event,
        flags=[f for f in FLAGS if f in flags],
        calls=calls,
    )


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


PROTOCOL_SCORES: dict[str, Callable[[JudgedQuestion], float]] = {
    BEAM_CODE: lambda row: row.score_beam_code,
}
"""Each other scoring protocol's score of a question row, by the protocol's name."""


def _group(js: Sequence[Judgement], rows: Sequence[JudgedQuestion]) -> dict[str, object]:
    """The fields of a `JudgeGroup` over these judgements and their question rows."""
    recalls = [r.evidence_recall for r in rows]
    return {
        "questions": len(js),
        "score": _mean([j.score for j in js]),
        "score_excluding_known_bad": _mean([j.score_excluding_known_bad for j in js]),
        "protocol_scores": {
            name: _mean([score(r) for r in rows]) for name, score in PROTOCOL_SCORES.items()
        },
        "judge_calls": sum(j.calls for j in js),
        "judge_calls_per_question": _mean([float(j.calls) for j in js]),
        "flagged": {flag: sum(flag in r.flags for r in rows) for flag in (*FLAGS, "error")},
        "evidence_recall": _mean(recalls),
    }


def check_judged(
    judgements: Sequence[Judgement], rubrics: Sequence[Rubric], rows: Sequence[JudgedQuestion]
) -> None:
    """DataError unless every rubric has exactly one judgement of its ability and one row."""
    by_id = {r.question_id: r for r in rubrics}
    seen: set[str] = set()
    for j in judgements:
        rubric = by_id.get(j.question_id)
        if rubric is None:
            raise DataError(
                f"judgement for {j.question_id} has no rubric; the inputs are out of step"
            )
        if rubric.ability != j.ability:
            raise DataError(
                f"{j.question_id}: judged as {j.ability}, but its rubric says {rubric.ability}"
            )
        if j.question_id in seen:
            raise DataError(f"{j.question_id} was judged twice")
        seen.add(j.question_id)
    missing = sorted(set(by_id) - seen)
    if missing:
        raise DataError(
            f"{len(missing)} question(s) have no judgement, e.g. {', '.join(missing[:5])}"
        )
    row_ids = [r.question_id for r in rows]
    if sorted(row_ids) != sorted(seen):
        raise DataError(
            "the question rows and the judgements name different questions (or one twice); "
            "the judge's outputs are out of step: run `dvc repro judge`"
        )


def summarize(
    judgements: Sequence[Judgement],
    rubrics: Sequence[Rubric],
    rows: Sequence[JudgedQuestion],
    *,
    failed_calls: int = 0,
) -> JudgeSummary:
    """The judge's summary (`LAYOUT.judge.summary`): one group per ability (all ten always
    present, null scores where an ability has no question) and `overall`. Ability score = mean
    over its questions; overall score = mean over all questions, `macro_score` = mean of the
    ability scores; the same for each protocol's score (`PROTOCOL_SCORES`, from the rows). Flags,
    evidence recall and the questions in error come from the question rows; `failed_calls` is
    the judge calls with no usable reply (no row holds them). Every rubric must have exactly one
    judgement and one row."""
    check_judged(judgements, rubrics, rows)
    groups = {
        ability: JudgeGroup.model_validate(
            _group(
                [j for j in judgements if j.ability == ability],
                [r for r in rows if r.ability == ability],
            )
        )
        for ability in ABILITIES
    }
    events = [j.event for j in judgements if j.event is not None]
    return JudgeSummary(
        abilities=groups,
        overall=JudgeOverall.model_validate(
            {
                **_group(judgements, rows),
                "macro_score": _mean([g.score for g in groups.values()]),
                "macro_score_excluding_known_bad": _mean(
                    [g.score_excluding_known_bad for g in groups.values()]
                ),
                "macro_protocol_scores": {
                    name: _mean([g.protocol_scores[name] for g in groups.values()])
                    for name in PROTOCOL_SCORES
                },
                "failed_calls": failed_calls,
            }
        ),
        events=EventScores(
            event_f1=_mean([e.f1 for e in events]),
            event_tau_norm=_mean([e.tau_norm for e in events]),
        ),
    )
