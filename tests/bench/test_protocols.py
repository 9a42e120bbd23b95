"""The scoring protocols (bench/protocols/) checked against each protocol's published code.

- omnimemeval: its item-score reader, its tau-b and its whole event-ordering scorer are taken
  from the real `scripts/beam/beam_eval.py` at the pin (`../shared/published/omnimemeval`,
  Apache-2.0; skipped with a reason where absent) and run on synthetic replies beside ours; its
  prompts are read from the real files and compared with what its own `.format` call makes.
- exabase: its prompts file carries no licence to copy, so it is neither here nor in ../shared;
  the prompt extraction runs on a stand-in of the same layout (tests/support/protocol_standin.py)
  and the arithmetic is checked on hand-worked cases from its beam/scoring.py at the pin (read
  there: the rounding, the list split, the greedy renaming, tau-b over names).
- the label and the summary on synthetic rows.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import random
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bench.protocols import PROTOCOLS, exabase, omnimemeval, protocol_judge, score_protocol
from bench.protocols.base import check_source, summarize_protocol
from bench.protocols.label import incomplete_reason, protocol_label
from clients.llm.port import ChatRequest
from schemas.errors import IntegrityError
from schemas.protocols import PinnedSource, ProtocolQuestion
from schemas.records import Question, Rubric
from tests.support.protocol_standin import (
    EXA_PROMPTS,
    standin_protocol_files,
    standin_protocol_pins,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
OMNI = REPO_ROOT.parent / "shared" / "published" / "omnimemeval"
needs_omni = pytest.mark.skipif(
    not (OMNI / omnimemeval.EVAL_FILE).is_file(),
    reason="../shared/published/omnimemeval (OmniMemEval's files at the pin) is absent",
)


def _their_functions(names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """The named functions of OmniMemEval's beam_eval.py at the pin, compiled alone (its imports
    of the rest of its package are left out) into `namespace`."""
    source = (OMNI / omnimemeval.EVAL_FILE).read_text(encoding="utf-8")
    tree = ast.parse(source)
    picked = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    module = ast.Module(body=[n for n in picked if n.name in names], type_ignores=[])
    scope = {"re": re, "json": json, **namespace}
    exec(compile(module, str(OMNI / omnimemeval.EVAL_FILE), "exec"), scope)
    return scope


def _their_prompts() -> dict[str, Any]:
    scope: dict[str, Any] = {}
    text = (OMNI / omnimemeval.PROMPTS_FILE).read_text(encoding="utf-8")
    exec(compile(text, str(OMNI / omnimemeval.PROMPTS_FILE), "exec"), scope)
    return scope


# -- omnimemeval against its own code ----------------------------------------------------------

ITEM_REPLIES = [
    '{"score": 1.0, "reason": "all there"}',
    '{"score": 0.8, "reason": "close"}',
    '{"score": 0.75}',
    '{"score": 0.74, "reason": "x"}',
    '{"score": 0.5, "reason": "half"}',
    '{"score": 0.25}',
    '{"score": 0.249}',
    '{"score": 0.0, "reason": "none"}',
    'Sure. {"reason": "nested {braces}", "score": 1.0}',  # not a flat object: the bare score
    "Score: 0.5",
    "score = 0.9 overall",
    '{"score": "0.5"}',  # a quoted number: neither pattern reads it
    "no verdict here",
    '```json\n{"score": 1, "reason": "fenced"}\n```',
    '{"score": 1.0.0}',
    "",
]


@needs_omni
@pytest.mark.parametrize("reply", ITEM_REPLIES)
def test_omnimemeval_item_score_is_its_own(reply: str) -> None:
    theirs = _their_functions({"_extract_item_score"}, {})["_extract_item_score"]
    try:
        expected = theirs(reply)[0]
    except ValueError:
        expected = 0.0  # theirs raises on "1.0.0" in its second pattern; we score it 0
    ours = omnimemeval.read_item_score(reply)
    assert (0.0 if ours is None else ours) == expected


@needs_omni
def test_omnimemeval_tau_b_is_its_own_on_random_ranks() -> None:
    theirs = _their_functions({"_kendall_tau_b"}, {})["_kendall_tau_b"]
    rng = random.Random(42)
    for _ in range(300):
        n = rng.randint(0, 8)
        reference = [rng.randint(0, 4) for _ in range(n)]
        placed = [rng.randint(1, 6) for _ in range(n)]
        assert omnimemeval.kendall_tau_b(reference, placed) == pytest.approx(
            theirs(reference, placed)
        )


def _their_order_score(content: str, events: list[str]) -> float:
    class Completions:
        async def create(self, **_: Any) -> Any:
            message = SimpleNamespace(content=content)
            return SimpleNamespace(choices=[SimpleNamespace(message=message)])

    client = SimpleNamespace(chat=SimpleNamespace(completions=Completions()))
    prompts = _their_prompts()
    scope = _their_functions(
        {"_judge_event_ordering", "_kendall_tau_b"},
        {"BEAM_EVENT_ORDERING_JUDGE_PROMPT": prompts["BEAM_EVENT_ORDERING_JUDGE_PROMPT"]},
    )
    result = asyncio.run(scope["_judge_event_ordering"](client, "m", "q?", events, "answer"))
    return float(result[0])


def _positions_reply(positions: list[Any]) -> str:
    return json.dumps(
        {"positions": [{"event": f"e{i}", "position": p} for i, p in enumerate(positions)]}
    )


@needs_omni
def test_omnimemeval_event_ordering_is_its_own_on_random_placements() -> None:
    rng = random.Random(7)
    cases = [
        ([1, 2, 3], 3),  # in order: 1
        ([3, 2, 1], 3),  # reversed: 0
        ([1, -1, -1, -1], 4),  # one placed: coverage × 0.5
        ([-1, -1], 2),  # none: 0
        ([2, 1, 3, -1], 4),
        ([1, 2], 4),  # fewer than the events: padded with -1
        ([1, 2, 3, 4, 5], 3),  # more: cut
        ([2, 2, 1], 3),  # ties
    ]
    for _ in range(150):
        n = rng.randint(1, 8)
        cases.append(([rng.choice([-1, *range(1, 10)]) for _ in range(rng.randint(0, n + 2))], n))
    for positions, n in cases:
        events = [f"event {i}" for i in range(n)]
        reply = _positions_reply(positions)
        read = omnimemeval.read_positions(reply)
        assert read is not None
        ours, _ = omnimemeval.order_score(read, n)
        assert ours == pytest.approx(_their_order_score(reply, events)), (positions, n)


@needs_omni
@pytest.mark.parametrize(
    "reply",
    [
        "no json at all",
        '{"positions": "not a list"}',
        '{"positions": [{"event": "a", "position": "2"}]}',
    ],
)
def test_omnimemeval_unreadable_placements_score_0_as_theirs(reply: str) -> None:
    assert omnimemeval.read_positions(reply) is None
    assert _their_order_score(reply, ["a", "b"]) == 0.0


def _omni_texts() -> dict[str, str]:
    return {
        p: (OMNI / p).read_text(encoding="utf-8")
        for p in (omnimemeval.EVAL_FILE, omnimemeval.PROMPTS_FILE)
    }


@needs_omni
def test_omnimemeval_prompts_are_read_from_its_real_files() -> None:
    judge = omnimemeval.read_judge(_omni_texts(), "v")
    theirs = _their_prompts()
    item = judge.item_request("When?", "LLM response should state: May", "In May {x}.")
    assert [m.role for m in item.messages] == ["system", "user"]
    assert item.messages[1].content == theirs["BEAM_RUBRIC_ITEM_JUDGE_PROMPT"].format(
        question="When?", rubric_item="LLM response should state: May", response="In May {x}."
    )
    events = ["first thing", "second thing"]
    order = judge.order_request("Order them?", events, "1. first thing")
    assert order.messages[1].content == theirs["BEAM_EVENT_ORDERING_JUDGE_PROMPT"].format(
        question="Order them?",
        reference_ordering="1. first thing\n2. second thing",
        response="1. first thing",
    )
    # the system line is the one its caller sends (read from beam_eval.py, not from here)
    source = (OMNI / omnimemeval.EVAL_FILE).read_text(encoding="utf-8")
    assert f'"content": "{item.messages[0].content}"' in source


@needs_omni
def test_the_pinned_omnimemeval_hashes_are_the_shared_files() -> None:
    pins = yaml.safe_load((REPO_ROOT / "pins.yaml").read_text())["judge"]["protocol_sources"]
    pin = PinnedSource.model_validate(pins["omnimemeval"])
    contents = {p: (OMNI / p).read_bytes() for p in pin.files}
    assert set(check_source("omnimemeval", pin, contents)) == set(pin.files)


# -- the pinned files -------------------------------------------------------------------------


def test_a_changed_protocol_file_is_refused() -> None:
    pin = PinnedSource.model_validate(standin_protocol_pins()["exabase"])
    files = standin_protocol_files()["exabase"]
    assert check_source("exabase", pin, files)
    changed = {p: data + b"\n" for p, data in files.items()}
    with pytest.raises(IntegrityError, match="sha256"):
        check_source("exabase", pin, changed)
    with pytest.raises(IntegrityError, match="not fetched"):
        check_source("exabase", pin, {})


def test_a_prompts_file_of_another_shape_is_refused() -> None:
    bad = EXA_PROMPTS.replace(
        "def equivalence_prompt(ref_item: str, sys_item: str)",
        "def equivalence_prompt(ref_item: str)",
    )
    with pytest.raises(IntegrityError, match="parameters"):
        exabase.read_judge({exabase.PROMPTS_FILE: bad}, "v")
    bad_schema = EXA_PROMPTS.replace(
        '"answer": {"type": "string"}', '"verdict": {"type": "string"}'
    )
    with pytest.raises(IntegrityError, match="EQUIVALENCE_SCHEMA"):
        exabase.read_judge({exabase.PROMPTS_FILE: bad_schema}, "v")


# -- exabase: prompts from a stand-in, arithmetic on hand-worked cases ----------------------


def _standin_exabase() -> dict[str, Any]:
    scope: dict[str, Any] = {}
    exec(compile(EXA_PROMPTS, "exabase_prompts.py", "exec"), scope)
    return scope


def test_exabase_prompts_are_what_its_functions_return() -> None:
    judge = exabase.read_judge({exabase.PROMPTS_FILE: EXA_PROMPTS}, "v")
    own = _standin_exabase()
    item = judge.item_request("Q <rubric_item>?", "An answer", "the item")
    assert [m.role for m in item.messages] == ["user"]
    assert item.messages[0].content == own["rubric_item_prompt"](
        "Q <rubric_item>?", "An answer", "the item"
    )
    assert item.schema is exabase.ExaBaseVerdict
    same = judge.equivalence_request("the event", "an item")
    assert same.messages[0].content == own["equivalence_prompt"]("the event", "an item")


@pytest.mark.parametrize(
    ("raw", "rounded"),
    [(1.0, 1.0), (0.75, 1.0), (0.74, 0.5), (0.5, 0.5), (0.25, 0.5), (0.249, 0.0), (0.0, 0.0)],
)
def test_exabase_rounds_raw_scores(raw: float, rounded: float) -> None:
    assert exabase.round_item(raw) == rounded


def test_exabase_item_reply_reading() -> None:
    assert exabase.item_score('{"score": 0.8, "reason": "r"}') == 1.0
    assert exabase.item_score('{"reason": "no score"}') == 0.0  # a missing score is a raw 0
    assert exabase.item_score(None) is None
    assert exabase.item_score("not json") is None


def test_exabase_list_items() -> None:
    text = "\n1. Alpha\n2) Beta\n- Gamma\n* Delta\n\n   10.Epsilon\n+ kept as is\n"
    assert exabase.list_items(text) == [
        "Alpha",
        "Beta",
        "Gamma",
        "Delta",
        "Epsilon",
        "+ kept as is",
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (["a", "b", "c"], 1.0),  # same order
        (["c", "b", "a"], 0.0),  # reversed
        # b missing: answer ranks a 1, c 2, b 4 -> pairs (a,b) C, (a,c) C, (b,c) D: tau 1/3
        (["a", "c"], 2 / 3),
        # an extra x: ranks ref [1,2,3,5], answer [1,3,4,2] -> 4 C, 2 D: tau 1/3
        (["a", "x", "b", "c"], 2 / 3),
        # a repeated name ranks at its last place: a 3, b 2, c 4 -> ref [1,2,3], ans [3,2,4]:
        # (a,b) D, (a,c) C, (b,c) C: tau 1/3
        (["a", "b", "a"], 2 / 3),
        ([], 0.0),  # nothing to rank: tau undefined
    ],
)
def test_exabase_ordering_score_by_hand(answer: list[str], expected: float) -> None:
    assert exabase.ordering_score(["a", "b", "c"], answer) == pytest.approx(expected)


def _ask_from(table: dict[tuple[str, str], bool], asked: list[tuple[str, str]]) -> Any:
    def ask(request: ChatRequest) -> str | None:
        text = request.messages[-1].content or ""
        first = re.search(r"First: (.*)", text)
        second = re.search(r"Second: (.*)", text)
        assert first and second
        pair = (first.group(1), second.group(1))
        asked.append(pair)
        return json.dumps({"answer": "yes, same" if table.get(pair) else "NO"})

    return ask


def test_exabase_event_ordering_matches_greedily_and_scores_tau_alone() -> None:
    judge = exabase.read_judge({exabase.PROMPTS_FILE: EXA_PROMPTS}, "v")
    question = Question(
        id="conv1:event_ordering:0",
        conversation_id="1",
        ability="event_ordering",
        index=0,
        question="Order?",
    )
    rubric = Rubric(
        question_id=question.id,
        ability="event_ordering",
        rubric=["E1", "E2", "E3"],
        source_chat_ids=[],
    )
    # the answer lists E2's item, then E1's, then an unrelated one; E3 is missing
    table = {("E2", "two"): True, ("E1", "one"): True}
    asked: list[tuple[str, str]] = []
    row = judge.judge_question(
        question, rubric, "1. two\n2. one\n3. other", _ask_from(table, asked)
    )
    # item "two": E1 no, E2 yes; item "one": E1 yes (E2 used); "other": E3 no
    assert asked == [("E1", "two"), ("E2", "two"), ("E1", "one"), ("E3", "other")]
    # renamed [E2, E1, other]: ref ranks [1,2,3,5], answer [2,1,5,3] over (E1,E2,E3,other):
    # (E1,E2) D, (E1,E3) C, (E1,other) C, (E2,E3) C, (E2,other) C, (E3,other) D: tau 2/6
    assert row.score == pytest.approx((1 / 3 + 1) / 2)
    assert row.calls == 4 and row.failed_calls == 0


# -- a protocol over questions, the summary and the label -----------------------------------


def test_a_failed_answer_scores_0_without_a_call() -> None:
    judge = exabase.read_judge({exabase.PROMPTS_FILE: EXA_PROMPTS}, "v")
    q = Question(
        id="conv1:information_extraction:0",
        conversation_id="1",
        ability="information_extraction",
        index=0,
        question="?",
    )
    rubric = Rubric(question_id=q.id, ability=q.ability, rubric=["x", "y"], source_chat_ids=[])
    asked: list[ChatRequest] = []

    def ask(request: ChatRequest) -> str | None:
        asked.append(request)
        return '{"score": 0.5, "reason": "r"}'

    rows = score_protocol(
        judge,
        "exabase",
        [q, q.model_copy(update={"id": "conv1:information_extraction:1"})],
        {
            q.id: rubric,
            "conv1:information_extraction:1": rubric.model_copy(
                update={"question_id": "conv1:information_extraction:1"}
            ),
        },
        {q.id: None, "conv1:information_extraction:1": "an answer"},
        ask,
        concurrency=2,
    )
    assert [r.score for r in rows] == [0.0, 0.5]
    assert rows[0].calls == 0 and len(asked) == 2


def test_summary_micro_and_macro_on_synthetic_rows() -> None:
    def row(ability: str, score: float) -> ProtocolQuestion:
        return ProtocolQuestion(
            protocol="omnimemeval",
            question_id=f"{ability}{score}",
            ability=ability,
            score=score,
            calls=1,
            failed_calls=0,
        )

    rows = [
        row("abstention", 1.0),
        row("abstention", 0.0),
        row("abstention", 0.5),
        row("summarization", 1.0),
    ]
    scores = summarize_protocol(
        PROTOCOLS["omnimemeval"],
        rows,
        source="r@c",
        judge_model="m",
        paper_comparable=False,
        label="l",
    )
    assert scores.micro == pytest.approx(2.5 / 4)
    assert scores.macro == pytest.approx((0.5 + 1.0) / 2)
    assert scores.score == scores.micro  # OmniMemEval's overall is the mean over questions
    assert scores.abilities["abstention"] == pytest.approx(0.5)
    assert scores.abilities["event_ordering"] is None


def test_only_beam_code_on_a_whole_tier_with_a_named_judge_is_paper_comparable() -> None:
    whole = incomplete_reason("all", [])
    assert whole is None
    ok, label = protocol_label(
        PROTOCOLS["beam_code"], incomplete=whole, judge_model="gpt-4.1-mini", test_model=False
    )
    assert ok and label.startswith("paper-comparable") and "gpt-4.1-mini" in label
    for name in ("omnimemeval", "exabase"):
        ok, label = protocol_label(
            PROTOCOLS[name], incomplete=whole, judge_model="gpt-4.1-mini", test_model=False
        )
        assert (
            not ok and label.startswith(PROTOCOLS[name].title) and "not paper-comparable" in label
        )
    lite = incomplete_reason("lite", [])
    ok, label = protocol_label(
        PROTOCOLS["beam_code"], incomplete=lite, judge_model="m", test_model=False
    )
    assert not ok and "mode lite" in label
    ok, label = protocol_label(
        PROTOCOLS["beam_code"],
        incomplete=incomplete_reason("all", ["4"]),
        judge_model="m",
        test_model=False,
    )
    assert not ok and "conversations 4" in label
    ok, label = protocol_label(
        PROTOCOLS["beam_code"], incomplete=whole, judge_model="", test_model=False
    )
    assert not ok and "not named" in label
    ok, _ = protocol_label(
        PROTOCOLS["beam_code"], incomplete=whole, judge_model="scripted/rules", test_model=True
    )
    assert not ok


def test_protocol_judge_reads_the_standins() -> None:
    pins = standin_protocol_pins()
    for name in ("omnimemeval", "exabase"):
        pin = PinnedSource.model_validate(pins[name])
        judge = protocol_judge(name, pin, standin_protocol_files()[name])  # type: ignore[arg-type]
        assert hasattr(judge, "judge_question")


def test_the_pinned_exabase_hash_is_a_sha256() -> None:
    pins = yaml.safe_load((REPO_ROOT / "pins.yaml").read_text())["judge"]["protocol_sources"]
    pin = PinnedSource.model_validate(pins["exabase"])
    assert pin.commit == "1faac1e70fa50d92d966904358be98bb1beca0c8"
    assert list(pin.files) == [exabase.PROMPTS_FILE]
    assert hashlib.sha256(b"").hexdigest() not in pin.files.values()


# -- the record's table and the headline ---------------------------------------------------


def _summary() -> Any:
    from schemas.protocols import ProtocolsSummary

    def row(protocol: str, ability: str, score: float) -> ProtocolQuestion:
        return ProtocolQuestion(
            protocol=protocol,  # type: ignore[arg-type]
            question_id=f"{ability}:{score}",
            ability=ability,
            score=score,
            calls=1,
            failed_calls=0,
        )

    scores = []
    for name, values in (("beam_code", (0.5, 0.0)), ("omnimemeval", (1.0, 0.5))):
        rows = [row(name, "abstention", values[0]), row(name, "event_ordering", values[1])]
        ok, label = protocol_label(
            PROTOCOLS[name],  # type: ignore[index]
            incomplete=incomplete_reason("all", []),
            judge_model="judge-x",
            test_model=False,
        )
        scores.append(
            summarize_protocol(
                PROTOCOLS[name],  # type: ignore[index]
                rows,
                source="o/r@c",
                judge_model="judge-x",
                paper_comparable=ok,
                label=label,
            )
        )
    return ProtocolsSummary(protocols=scores)


def test_record_table_is_ability_by_protocol_with_judges_and_labels() -> None:
    from bench.protocols.table import protocol_table

    lines = protocol_table(_summary())
    text = "\n".join(lines)
    assert "| ability | beam_code (judge `judge-x`) | omnimemeval (judge `judge-x`) |" in text
    assert "| abstention | 0.500 | 1.000 |" in text
    assert "| event_ordering | 0.000 | 0.500 |" in text
    assert "| summarization | – | – |" in text
    assert "| overall (micro) | 0.250 | 0.750 |" in text
    assert "**paper-comparable (BEAM's prompts and formula, judge judge-x)**" in text
    assert "**OmniMemEval protocol (judge judge-x); not paper-comparable" in text


def test_headline_carries_each_other_protocol_and_keeps_beam_code_keys() -> None:
    from bench.protocols.table import protocol_metrics
    from schemas.headline import Headline

    metrics = protocol_metrics(_summary())
    assert metrics == {"omnimemeval": pytest.approx(0.75)}
    assert "protocol_score" not in Headline().model_dump(mode="json")  # beam_code alone: absent
    assert Headline(protocol_score=metrics).model_dump(mode="json")["protocol_score"] == metrics
