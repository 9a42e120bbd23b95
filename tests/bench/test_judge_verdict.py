"""The judge reads only a top-level verdict, never a fragment.

A small real model, cut at its token cap while listing contradictory verdicts
(`{"score": [{"score": 1.0 ...}, {"score": 0.5 ...}, ...`), was once scored 1.0 for a wrong
answer. Here: such a reply, a score found only inside a nested object, and any reply that
stopped at max_tokens (`finish_reason: length`) give no score: the first two are parse errors,
a cut reply is a failed call counted with the judge's failures. The reply schema holds the score
to the benchmark's own scale, so a server that turns it into a grammar keeps a model inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from bench.judge import JudgeCalls, item_request, judge_question
from bench.scorer_prompts import Message, extract_judge_prompts, item_messages
from bench.scoring import NO_REPLY, JudgeVerdict, score_item, usable_reply
from clients.llm.port import ChatRequest, Completion
from schemas.judging import ITEM_VALUES, JudgePrompts
from schemas.records import Question, Rubric
from stages.common import load_scorer_prompts, read_params
from tests.conftest import REPO_ROOT as ROOT
from tests.support import scorer_standin as standin

# The reply of the issue: contradictory verdicts listed under `score`, cut at the token cap.
CUT_CONTRADICTORY = (
    '{"score": [{"score": 1.0, "reason": "the answer names the city"}, '
    '{"score": 0.5, "reason": "only the month"}, {"score": 0.0, "reason": "the bud'
)
NESTED_ONLY = [
    '{"verdict": {"score": 1.0, "reason": "nested"}}',
    '{"reason": "see the details", "details": [{"score": 1.0}]}',
    '[{"score": 1.0, "reason": "a list, not an object"}]',
    '{"score": [{"score": 1.0}, {"score": 0.5}]}',  # complete, but no score of its own
    '{"score": {"score": 1.0}, "reason": "an object where the number belongs"}',
]
COMPLETE = '{"score": 1.0, "reason": "all there"}'


def completion(
    text: str | None, finish_reason: str | None = "stop", **fields: object
) -> Completion:
    return Completion.model_validate(
        {"text": text, "finish_reason": finish_reason, "model": "fake/judge", **fields}
    )


class FakeJudgeModel:
    """Answers each request by rule with a ready Completion and keeps the requests it got."""

    def __init__(self, rule: Callable[[ChatRequest], Completion]) -> None:
        self.rule = rule
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        return self.rule(request)

    def run_batch(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return [self.complete(r) for r in requests]


@pytest.fixture(scope="module")
def prompts() -> JudgePrompts:
    return extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())


def _question(ability: str = "information_extraction") -> Question:
    return Question(
        id=f"conv1:{ability}:0",
        conversation_id="1",
        ability=ability,
        index=0,
        question="Which city did I pick for the offsite?",
    )


def _rubric(items: list[str], ability: str = "information_extraction") -> Rubric:
    return Rubric(
        question_id=f"conv1:{ability}:0", ability=ability, rubric=items, source_chat_ids=[3]
    )


def _item_messages(prompts: JudgePrompts, items: list[str], answer: str) -> list[list[Message]]:
    """What the judge stage sends up front for the items of one question."""
    return [item_messages(prompts, _question().question, item, answer) for item in items]


# -- the reply: only the top-level object's own score ---------------------------------------


def test_the_cut_contradictory_reply_of_the_issue_is_never_scored() -> None:
    item = score_item("Names Lisbon", CUT_CONTRADICTORY)
    assert item.score == 0.0 and item.parse_error
    assert item.error is not None and "cut off" in item.error


@pytest.mark.parametrize("reply", NESTED_ONLY)
def test_a_score_found_only_inside_a_nested_value_is_no_verdict(reply: str) -> None:
    item = score_item("Names Lisbon", reply)
    assert item.score == 0.0 and item.parse_error, item


def test_the_top_level_score_counts_whatever_is_nested_in_the_reason() -> None:
    reply = '{"reason": "not {\\"score\\": 1.0} as a draft said", "score": 0.0}'
    item = score_item("Names Lisbon", reply)
    assert (item.score, item.parse_error) == (0.0, False)
    assert item.reason == 'not {"score": 1.0} as a draft said'


def test_a_nested_only_reply_flags_the_question_and_scores_zero(prompts: JudgePrompts) -> None:
    model = FakeJudgeModel(lambda request: completion(NESTED_ONLY[0]))
    calls = JudgeCalls(model, prompts)
    calls.send_items(_item_messages(prompts, ["Names Lisbon"], "Porto."))
    judgement = judge_question(_question(), _rubric(["Names Lisbon"]), "Porto.", prompts, calls.ask)
    assert judgement.score == 0.0
    assert judgement.flags == ["parse_error"]
    assert calls.failures == []  # a reply that arrived whole is a parse error, not a failed call
    assert len(model.requests) == 1  # the item was sent once, up front


# -- a reply cut at max_tokens: a failed call, never a score ---------------------------------


@pytest.mark.parametrize(
    "text",
    [
        COMPLETE,  # parses to a valid verdict, but the model had not finished
        COMPLETE + '\n{"score": 0.0, "reason": "on second thought the ci',  # first value closed
        CUT_CONTRADICTORY,
        "",
    ],
)
def test_a_reply_cut_at_max_tokens_is_no_reply_and_says_why(text: str) -> None:
    reply, failure = usable_reply(completion(text, "length", completion_tokens=64))
    assert reply is None
    assert failure is not None and "max_tokens (64 tokens)" in failure


def test_usable_reply_passes_a_whole_reply_and_refuses_failed_or_empty_ones() -> None:
    assert usable_reply(completion(COMPLETE)) == (COMPLETE, None)
    assert usable_reply(completion(None, None, error="HTTP 500", failure="transport")) == (
        None,
        "HTTP 500",
    )
    assert usable_reply(completion("  ")) == (None, "empty reply")


def test_a_length_cut_item_is_a_failed_item_counted_with_the_failures(
    prompts: JudgePrompts,
) -> None:
    def rule(request: ChatRequest) -> Completion:
        text = request.messages[0].content or ""
        if "- CHECK: Gives the date\n" in text:
            return completion(COMPLETE, "length", completion_tokens=32)  # cut, yet it parses
        return completion(COMPLETE)

    model = FakeJudgeModel(rule)
    calls = JudgeCalls(model, prompts)
    items = ["Names Lisbon", "Gives the date"]
    calls.send_items(_item_messages(prompts, items, "Lisbon."))
    judgement = judge_question(_question(), _rubric(items), "Lisbon.", prompts, calls.ask)
    assert [i.score for i in judgement.items] == [1.0, 0.0]
    cut = judgement.items[1]
    assert cut.error == NO_REPLY and not cut.parse_error and cut.reply is None
    assert judgement.flags == ["model_error"]
    assert len(calls.failures) == 1 and "max_tokens" in calls.failures[0]
    assert len(model.requests) == 2 and all(r.schema is JudgeVerdict for r in model.requests)


def test_a_length_cut_equivalence_reply_is_a_failed_call_not_a_match(
    prompts: JudgePrompts,
) -> None:
    """A free-text reply cut at max_tokens ("Yes" then nothing) is no verdict either."""
    model = FakeJudgeModel(lambda request: completion("Yes", "length", completion_tokens=1))
    calls = JudgeCalls(model, prompts)
    rubric = _rubric(["moved to Lisbon", "signed the lease"], "event_ordering")
    judgement = judge_question(
        _question("event_ordering"), rubric, "moved to Lisbon\nsigned the lease", prompts, calls.ask
    )
    assert judgement.event is not None and judgement.event.matches == [None, None]
    assert judgement.score == 0.0
    assert "model_error" in judgement.flags
    assert len(calls.failures) == judgement.calls == len(model.requests) == 4


# -- the schema a grammar is made from ---------------------------------------------------------


def test_the_reply_schema_holds_the_score_to_the_scale_and_nothing_else(
    prompts: JudgePrompts,
) -> None:
    schema = item_request([{"role": "user", "content": "x"}], prompts).schema
    assert schema is JudgeVerdict
    json_schema = JudgeVerdict.model_json_schema()
    assert json_schema["properties"]["score"]["enum"] == list(ITEM_VALUES)
    assert json_schema["properties"]["reason"] == {"title": "Reason", "type": "string"}
    assert json_schema["required"] == ["score", "reason"]
    assert json_schema["additionalProperties"] is False
    assert list(json_schema["properties"]) == ["score", "reason"]  # the prompt's order


@pytest.mark.beam
def test_the_enum_is_the_scale_of_the_benchmarks_pinned_prompt(shared_beam: Path) -> None:
    """The score values the pinned judge prompt allows (its OUTPUT FORMAT line) are the enum."""
    params = read_params(ROOT / "params.yaml").judge
    pinned_dir = shared_beam / "scorer" / params.scorer_repo / params.scorer_commit
    if not (pinned_dir / params.prompts.path).is_file():
        pytest.skip(f"the pinned scorer files are not under {pinned_dir}")
    prompts = load_scorer_prompts(params, pinned_dir)
    line = next(ln for ln in prompts.item_prompt.splitlines() if '"score":' in ln)
    scale = sorted(float(v) for v in re.findall(r"\d+\.\d+", line))
    assert scale == sorted(JudgeVerdict.model_json_schema()["properties"]["score"]["enum"])
