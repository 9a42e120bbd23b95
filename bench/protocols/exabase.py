"""exabase: BEAM scored with ExaBase's published prompts and rules, as past.dev's copy runs them
(pastdotdev/benchmarks at the pinned commit: beam/exabase_prompts.py for the prompts,
beam/scoring.py for the rules, read there; ExaBase's prompts carry no licence to copy, so they
are only ever read from the pinned file, never held in this repository).

- Rubric items: one call per item, one user message (`rubric_item_prompt(question, answer, item)`,
  which shows the judge the question), the reply held to `{score: number, reason: string}`; the
  raw score is rounded: from 0.75 it counts 1, from 0.25 0.5, below 0; a call without a verdict
  scores 0. The question scores the mean of its items.
- Event ordering: the answer's list items (numbers and bullets stripped, empty lines dropped) are
  matched in order to the first still-unmatched reference event the judge calls the same
  (`equivalence_prompt(event, item)`, a reply `{answer}` starting with YES; a failed call is
  "different"); a matched item takes the event's name. Score (tau_b + 1) / 2 alone, tau_b between
  the two orders over every distinct name, a name missing from one order ranked after all in it;
  0 when tau_b is undefined, there is no reference or the answer lists nothing.
- Aggregate: the mean over all questions (micro; the macro mean is reported beside it).
- The answer protocol passes the dataset's annotations to the answerer: opt-in here (params
  `answer.protocol: exabase`, bench/protocols/answering.py), by default our answerer sees the
  question only; past.dev's published run used openai/gpt-5.6-luna for both roles.

The prompts are read from the pinned file's syntax tree, never executed.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict
from scipy.stats import kendalltau

from bench.event_order import EVENT_ORDERING, warnings_ignored
from bench.protocols.base import (
    ProtocolAsk,
    ScoringProtocol,
    module_constant,
    module_function,
    parse_source,
    round_item,
)
from bench.scorer_prompts import (
    FIRST,
    LLM_RESPONSE,
    QUESTION,
    RUBRIC_ITEM,
    SECOND,
    _bindings,
    _string_value,
    fill_placeholders,
)
from clients.llm.port import ChatRequest
from clients.llm.port import Message as LlmMessage
from clients.llm.replies import parse_json_reply
from schemas.errors import IntegrityError
from schemas.protocols import ProtocolQuestion
from schemas.records import Question, Rubric

PROMPTS_FILE = "beam/exabase_prompts.py"
ITEM_FUNCTION = "rubric_item_prompt"
EQUIVALENCE_FUNCTION = "equivalence_prompt"
ITEM_TASK = "exabase_judge"
EQUIVALENCE_TASK = "exabase_equivalence"


class ExaBaseVerdict(BaseModel):
    """The reply its RUBRIC_SCHEMA holds the judge to (the file's schema is checked to match)."""

    model_config = ConfigDict(extra="forbid")
    score: float
    reason: str


class ExaBaseEquivalence(BaseModel):
    """The reply its EQUIVALENCE_SCHEMA holds the judge to."""

    model_config = ConfigDict(extra="forbid")
    answer: str


# ---------------------------------------------------------------------------------------------
# Arithmetic (pure)
# ---------------------------------------------------------------------------------------------


_LIST_MARKER = re.compile(r"^\s*(?:\d+[.)]\s*|[-*]\s*)")


def list_items(text: str) -> list[str]:
    """A list's items: each line of the stripped text without its leading number (`1.`, `2)`)
    or bullet (`-`, `*`), stripped; empty ones dropped."""
    items = [_LIST_MARKER.sub("", line, count=1).strip() for line in text.strip().splitlines()]
    return [item for item in items if item]


def same_event(reply: str | None) -> bool:
    """An equivalence verdict: the reply's `answer` starts with YES (any case); no reply, or one
    without an answer, is "different"."""
    verdict = _reply_object(reply)
    answer = verdict.get("answer", "") if verdict is not None else ""
    return isinstance(answer, str) and answer.strip().upper().startswith("YES")


def item_score(reply: str | None) -> float | None:
    """A rubric item's rounded score from the judge's reply (a reply without `score` counts a raw
    0, as theirs does); None when there is no reply object (scored 0 and counted as failed)."""
    verdict = _reply_object(reply)
    if verdict is None:
        return None
    try:
        return round_item(float(verdict.get("score", 0)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _reply_object(reply: str | None) -> dict[str, object] | None:
    if reply is None:
        return None
    try:
        value = parse_json_reply(reply)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def ordering_score(reference: Sequence[str], answer_order: Sequence[str]) -> float:
    """(tau_b + 1) / 2 of the two orders over every distinct name (reference first); a name ranks
    at its last place in an order, and after everything in it (distinct names + 1) when absent
    from it. Undefined tau_b scores 0."""
    names = list(dict.fromkeys([*reference, *answer_order]))
    absent = len(names) + 1

    def ranks(order: Sequence[str]) -> list[int]:
        place = {name: rank for rank, name in enumerate(order, start=1)}
        return [place.get(name, absent) for name in names]

    with warnings_ignored():
        tau_b = float(kendalltau(ranks(reference), ranks(answer_order), variant="b").statistic)
    return 0.0 if math.isnan(tau_b) else (tau_b + 1) / 2


def renamed_answer(
    reference: Sequence[str], items: Sequence[str], verdicts: Mapping[tuple[int, int], bool]
) -> list[str]:
    """The answer's items with each matched one renamed to its event: item k matches the first
    event, in order, not matched before, whose verdict (event index, k) is True."""
    matched: set[int] = set()
    renamed: list[str] = []
    for k, item in enumerate(items):
        match = next(
            (i for i in range(len(reference)) if i not in matched and verdicts.get((i, k))),
            None,
        )
        if match is None:
            renamed.append(item)
        else:
            matched.add(match)
            renamed.append(reference[match])
    return renamed


# ---------------------------------------------------------------------------------------------
# Prompts from the pinned file
# ---------------------------------------------------------------------------------------------


def _function_template(module: ast.Module, name: str, slots: Sequence[str]) -> str:
    """What function `name` returns, its parameters (in order) turned into `slots`."""
    function = module_function(module, name, PROMPTS_FILE)
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if len(params) != len(slots):
        raise IntegrityError(
            f"{PROMPTS_FILE}:{function.lineno}: {name}() takes {len(params)} parameters, expected "
            f"{len(slots)}; check the pin in pins.yaml (judge.protocol_sources.exabase)"
        )
    returns = [n for n in function.body if isinstance(n, ast.Return) and n.value is not None]
    if not returns or returns[-1].value is None:
        raise IntegrityError(f"{PROMPTS_FILE}: {name}() returns no prompt")
    text = _string_value(
        returns[-1].value,
        source=PROMPTS_FILE,
        what=f"{name}()",
        scopes=[_bindings(function.body)],
        placeholders=dict(zip(params, slots, strict=True)),
    )
    missing = [s for s in slots if s not in text]
    if missing:
        raise IntegrityError(f"{PROMPTS_FILE}: {name}() never uses {', '.join(missing)}")
    return text


def _check_schema(module: ast.Module, name: str, model: type[BaseModel]) -> None:
    schema = module_constant(module, name, PROMPTS_FILE)
    fields = sorted(schema.get("properties", {})) if isinstance(schema, dict) else None
    if fields != sorted(model.model_fields):
        raise IntegrityError(
            f"{PROMPTS_FILE}: {name} asks for {fields}, this port reads "
            f"{sorted(model.model_fields)}; check the pin (judge.protocol_sources.exabase)"
        )


@dataclass(frozen=True)
class ExaBaseJudge:
    item_template: str
    equivalence_template: str
    version: str

    def item_request(self, question: str, answer: str, rubric_item: str) -> ChatRequest:
        text = fill_placeholders(
            self.item_template, {QUESTION: question, LLM_RESPONSE: answer, RUBRIC_ITEM: rubric_item}
        )
        return ChatRequest(
            messages=(LlmMessage(role="user", content=text),),
            task=ITEM_TASK,
            prompt_version=self.version,
            schema=ExaBaseVerdict,
        )

    def equivalence_request(self, event: str, item: str) -> ChatRequest:
        text = fill_placeholders(self.equivalence_template, {FIRST: event, SECOND: item})
        return ChatRequest(
            messages=(LlmMessage(role="user", content=text),),
            task=EQUIVALENCE_TASK,
            prompt_version=self.version,
            schema=ExaBaseEquivalence,
        )

    def judge_question(
        self, question: Question, rubric: Rubric, answer: str, ask: ProtocolAsk
    ) -> ProtocolQuestion:
        if question.ability == EVENT_ORDERING:
            return self._judge_order(question, rubric.rubric, answer, ask)
        items: list[float] = []
        failed = 0
        for item in rubric.rubric:
            value = item_score(ask(self.item_request(question.question, answer, item)))
            failed += value is None
            items.append(0.0 if value is None else value)
        return ProtocolQuestion(
            protocol="exabase",
            question_id=question.id,
            ability=question.ability,
            score=sum(items) / len(items),
            item_scores=items,
            calls=len(items),
            failed_calls=failed,
        )

    def _judge_order(
        self, question: Question, reference: Sequence[str], answer: str, ask: ProtocolAsk
    ) -> ProtocolQuestion:
        items = list_items(answer)
        verdicts: dict[tuple[int, int], bool] = {}
        calls = failed = 0
        matched: set[int] = set()
        for k, item in enumerate(items):
            for i, event in enumerate(reference):
                if i in matched:
                    continue
                reply = ask(self.equivalence_request(event, item))
                calls += 1
                failed += reply is None
                verdicts[(i, k)] = same_event(reply)
                if verdicts[(i, k)]:
                    matched.add(i)
                    break
        renamed = renamed_answer(reference, items, verdicts)
        score = ordering_score(reference, renamed) if reference and items else 0.0
        return ProtocolQuestion(
            protocol="exabase",
            question_id=question.id,
            ability=question.ability,
            score=score,
            calls=calls,
            failed_calls=failed,
            detail=f"{len(matched)} of {len(reference)} events matched, {len(items)} answer items",
        )


def read_judge(texts: Mapping[str, str], version: str) -> ExaBaseJudge:
    """The judge from the pinned exabase_prompts.py (its source text)."""
    module = parse_source(texts[PROMPTS_FILE], PROMPTS_FILE)
    _check_schema(module, "RUBRIC_SCHEMA", ExaBaseVerdict)
    _check_schema(module, "EQUIVALENCE_SCHEMA", ExaBaseEquivalence)
    return ExaBaseJudge(
        item_template=_function_template(
            module, ITEM_FUNCTION, (QUESTION, LLM_RESPONSE, RUBRIC_ITEM)
        ),
        equivalence_template=_function_template(module, EQUIVALENCE_FUNCTION, (FIRST, SECOND)),
        version=version,
    )


PROTOCOL = ScoringProtocol(
    name="exabase",
    title="ExaBase",
    published_judge="openai/gpt-5.6-luna (past.dev's run)",
    judge_prompt=f"ExaBase's, shown the question ({PROMPTS_FILE} {ITEM_FUNCTION})",
    item_scale="0 / 0.5 / 1; a raw score from 0.75 counts 1, from 0.25 0.5",
    event_formula="(tau_b + 1) / 2 alone, after a per-item equivalence judge",
    aggregate="micro",
    read_judge=read_judge,
)
