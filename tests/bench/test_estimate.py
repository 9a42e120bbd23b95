"""The dry-run estimator: its shapes (pairs within a label, calls per batch, tool results by
graph), its structure (calls scale with chunks, questions and rubric items; caps hold; every
phase grows with each rate), and the rates it takes from a finished run's files.

None of this checks the rates against a model: they are assumptions (params) or one run's
measurements (`--from`). The end-to-end round trip on a real pipeline run is
tests/e2e/test_pipeline.py's `assert_estimate_round_trip`."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.estimate import (
    RunData,
    estimate_judge,
    format_memory,
    format_table,
    judge_rates_from_run,
    read_run,
)
from clients.runs import RunFolder
from clients.tokens import count_tokens
from schemas.errors import DataError
from schemas.estimate import RoleEstimate
from schemas.judging import JudgedQuestion
from schemas.memory import ENTITY_LABELS, UPDATABLE_LABELS
from schemas.params import AgentRates, EstimateParams, IngestRates, JudgeRates
from schemas.records import ChatMessage, ChatSlice, Question, Rubric, Session
from schemas.runs import MemorySizes
from schemas.traces import ToolCallRecord, Trace
from systems.chunking import chunk_conversation
from systems.graphrag.cost import estimate_answer, tool_result_rows
from systems.graphrag.estimate import (
    _pair_calls,
    agent_rates_from_run,
    capped_poisson_mean,
    entity_pairs_in_label,
    estimate_ingest,
    fit_rate,
    ingest_rates_from_run,
    statement_pairs_in_label,
)
from systems.graphrag.ingest import IngestSettings
from systems.graphrag.prompts import AGENT
from systems.graphrag.resolve import StatementRef, statement_pairs
from systems.graphrag.system import searchable_items

INGEST_RATES = IngestRates(
    entities_per_chunk=1,
    statements_per_chunk=2,
    updatable_share=1,
    entity_labels_in_use=1,
    statement_labels_in_use=1,
    entity_lookalike_rate=0.01,
    statement_overlap_rate=0.05,
    extraction_completion_tokens=100,
    tokens_per_entity_pair=20,
    tokens_per_statement_pair=90,
    completion_tokens_per_pair=12,
)
AGENT_RATES = AgentRates(
    calls_per_question=2,
    result_rows_per_step=13,
    result_match_share=0.25,
    tokens_per_result_row=80,
    completion_tokens_per_call=60,
)


def _poisson_capped_by_summing(rate: float, cap: int) -> float:
    pmf = [math.exp(-rate) * rate**k / math.factorial(k) for k in range(60)]
    return sum(min(cap, k) * p for k, p in enumerate(pmf))


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.3, 1.0, 2.5, 7.0])
@pytest.mark.parametrize("cap", [1, 3, 5])
def test_capped_poisson_mean_matches_the_sum_over_the_distribution(rate: float, cap: int) -> None:
    assert capped_poisson_mean(rate, cap) == pytest.approx(
        _poisson_capped_by_summing(rate, cap), abs=1e-9
    )


def test_entity_pairs_grow_with_the_square_of_a_small_label_and_linearly_in_a_large_one() -> None:
    rate, slots = 0.001, 3
    small = [entity_pairs_in_label(m, rate, slots) for m in (10, 20, 40)]
    assert small[1] / small[0] == pytest.approx(4, rel=0.1)
    assert small[2] / small[1] == pytest.approx(4, rel=0.1)
    # far past the point where every mention fills its slots: about `slots` pairs per mention
    large = [entity_pairs_in_label(m, rate, slots) for m in (20_000, 40_000)]
    assert (large[1] - large[0]) / 20_000 == pytest.approx(slots, rel=0.01)


def test_statements_of_one_chunk_never_pair_with_each_other() -> None:
    assert statement_pairs_in_label(50, 1, 0.5, 3) == 0
    assert statement_pairs_in_label(50, 2, 0.5, 3) > 0


def test_the_statement_shape_agrees_with_the_linker_on_a_sampled_conversation() -> None:
    """Statements each about one of `pool` entities share one with chance 1/pool: the expected
    count the estimator computes is what statement_pairs finds (within sampling noise)."""
    rng = random.Random(7)
    pool, chunks, per_chunk, slots = 40, 60, 2, 3
    found = []
    for _ in range(5):
        refs = [
            StatementRef(f"s{c}:{i}", "Fact", frozenset({f"e{rng.randrange(pool)}"}), c)
            for c in range(chunks)
            for i in range(per_chunk)
        ]
        pairs = statement_pairs(refs, labels=frozenset({"Fact"}), per_statement=slots)
        found.append(len(pairs))
    expected = statement_pairs_in_label(per_chunk, chunks, 1 / pool, slots)
    assert sum(found) / len(found) == pytest.approx(expected, rel=0.1)


def test_a_call_counted_carries_at_least_one_pair_and_no_pairs_make_no_call() -> None:
    assert _pair_calls(0.0, 20, 90, 130, INGEST_RATES).calls == 0
    few = _pair_calls(0.2, 20, 90, 130, INGEST_RATES)
    assert few.calls == 1
    assert few.prompt_tokens == 130 + 90  # the system prompt and one pair, not a fifth of one
    many = _pair_calls(45, 20, 90, 130, INGEST_RATES)
    assert many.calls == 3
    assert many.prompt_tokens == 3 * 130 + 45 * 90
    assert many.completion_tokens == 45 * 12


def test_tool_results_are_a_share_of_a_small_graph_and_capped_in_a_large_one() -> None:
    assert tool_result_rows(20, AGENT_RATES) == pytest.approx(5)
    assert tool_result_rows(2_000, AGENT_RATES) == 13


def test_agent_estimate_follows_the_graph_of_each_question() -> None:
    def question(conversation: str, i: int) -> Question:
        return Question(
            id=f"conv{conversation}:information_extraction:{i}",
            conversation_id=conversation,
            ability="information_extraction",
            index=i,
            question="When did I start?",
        )

    small = estimate_answer([question("1", 0)], 6, AGENT_RATES, "system", {"1": 20})
    large = estimate_answer([question("2", 0)], 6, AGENT_RATES, "system", {"2": 2_000})
    assert small.calls == large.calls == 2
    # one tool step is re-sent by the second call: 5 rows of a small graph, 13 of a large one
    assert large.prompt_tokens - small.prompt_tokens == (13 - 5) * 80
    with pytest.raises(KeyError):
        estimate_answer([question("3", 0)], 6, AGENT_RATES, "system", {"1": 20})


def test_label_bounds_of_the_rates_follow_the_schema() -> None:
    fields = IngestRates.model_fields
    bounds = {
        name: next(m.le for m in fields[name].metadata if hasattr(m, "le"))
        for name in ("entity_labels_in_use", "statement_labels_in_use")
    }
    assert bounds == {
        "entity_labels_in_use": len(ENTITY_LABELS),
        "statement_labels_in_use": len(UPDATABLE_LABELS),
    }


def test_the_answer_stage_counts_what_the_agent_searches_in_a_graph_file(tmp_path: Path) -> None:
    lines = [
        {"node": {"id": "c0", "label": "Chunk"}},
        {"node": {"id": "e0", "label": "Person"}},
        {"node": {"id": "e1", "label": "Topic"}},
        {"node": {"id": "s0", "label": "Fact"}},
        {"node": {"id": "x0", "label": "Session"}},  # not searched
        {"node": {"id": "x1", "label": "Conversation"}},
        {"relationship": {"type": "ABOUT", "start": "s0", "end": "e0"}},
    ]
    graph = tmp_path / "conv1.jsonl"
    graph.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    assert searchable_items(graph) == 4


# ---------------------------------------------------------------------------------------------
# The estimator's structure
# ---------------------------------------------------------------------------------------------

WORDS = [
    "garden",
    "tomato",
    "river",
    "Tuesday",
    "lantern",
    "budget",
    "violin",
    "harbour",
    "ledger",
    "meadow",
]
SETTINGS = IngestSettings(
    chunk_tokens=200,
    max_llm_pairs=10**6,
    candidates_per_entity=3,
    min_similarity=0.5,
    pairs_per_call=20,
    candidates_per_statement=3,
)
RATES = EstimateParams(
    ingest=IngestRates(
        entities_per_chunk=4,
        statements_per_chunk=5,
        updatable_share=0.6,
        entity_labels_in_use=2.5,
        statement_labels_in_use=2,
        entity_lookalike_rate=0.02,
        statement_overlap_rate=0.05,
        extraction_completion_tokens=300,
        extraction_prompt_ratio=1.2,
        tokens_per_entity_pair=30,
        tokens_per_statement_pair=80,
        completion_tokens_per_pair=12,
    ),
    agent=AgentRates(
        calls_per_question=3,
        result_rows_per_step=10,
        result_match_share=0.2,
        tokens_per_result_row=60,
        completion_tokens_per_call=90,
        overhead_tokens_per_call=400,
    ),
    judge=JudgeRates(
        answer_tokens=120,
        item_prompt_tokens=900,
        equivalence_prompt_tokens=200,
        completion_tokens_per_call=40,
        event_calls_per_item=1.5,
        prompt_ratio=1.1,
    ),
)


def chat(conversation: str, sessions: int, messages: int = 6) -> ChatSlice:
    """A made-up chat: `sessions` sessions of `messages` messages of about 60 tokens each."""
    rng = random.Random(int(conversation))
    out, next_id = [], 0
    for number in range(1, sessions + 1):
        texts = [" ".join(rng.choice(WORDS) for _ in range(50)) for _ in range(messages)]
        out.append(
            Session(
                number=number,
                date="March-1-2024",
                date_iso="2024-03-01",
                messages=[
                    ChatMessage(
                        id=next_id + i, role="user" if i % 2 == 0 else "assistant", content=t
                    )
                    for i, t in enumerate(texts)
                ],
            )
        )
        next_id += messages
    return ChatSlice(conversation_id=conversation, sessions=out)


def twin(source: ChatSlice, conversation: str) -> ChatSlice:
    return source.model_copy(update={"conversation_id": conversation})


def question(conversation: str, ability: str = "information_extraction", i: int = 0) -> Question:
    return Question(
        id=f"conv{conversation}:{ability}:{i}",
        conversation_id=conversation,
        ability=ability,  # type: ignore[arg-type]
        index=i,
        question="When did I first mention the garden, and what did I plan for it?",
    )


def rubric(q: Question, items: int) -> Rubric:
    return Rubric(
        question_id=q.id,
        ability=q.ability,
        rubric=[f"States fact number {i} about the garden plan" for i in range(items)],
        source_chat_ids=[1],
    )


def all_phases(
    chats: Sequence[ChatSlice],
    questions: Sequence[Question],
    rubrics: Sequence[Rubric],
    rates: EstimateParams = RATES,
    settings: IngestSettings = SETTINGS,
    max_steps: int = 6,
) -> dict[str, RoleEstimate]:
    """GraphRAG's phases (as systems/graphrag/system.py estimates them before the build) and the
    judge's, without prompts at hand (the template rates count)."""
    ingest = estimate_ingest(chats, settings, rates.ingest)
    items = {c: g.items for c, g in ingest.graphs.items()}
    return {
        "extraction": ingest.extraction,
        "resolution": ingest.resolution,
        "agent": estimate_answer(questions, max_steps, rates.agent, AGENT.text, items),
        "judge": estimate_judge(rubrics, {q.id: q.question for q in questions}, rates.judge),
    }


def test_extraction_makes_one_call_per_chunk_and_doubles_with_the_chat() -> None:
    one = estimate_ingest([chat("1", 6)], SETTINGS, RATES.ingest)
    chunks = len(chunk_conversation(chat("1", 6), SETTINGS.chunk_tokens))
    assert chunks > 6  # several chunks a session: the test is not about one chunk
    assert one.extraction.calls == one.chunks == chunks
    two = estimate_ingest([chat("1", 6), twin(chat("1", 6), "2")], SETTINGS, RATES.ingest)
    assert two.extraction == one.extraction + one.extraction
    assert two.resolution == one.resolution + one.resolution  # pairs stay within a conversation
    longer = estimate_ingest([chat("1", 12)], SETTINGS, RATES.ingest)
    assert longer.extraction.calls == len(chunk_conversation(chat("1", 12), 200))
    assert longer.extraction.calls / one.extraction.calls == pytest.approx(2, rel=0.1)


def test_the_extraction_prompt_is_the_counted_prompt_times_its_ratio() -> None:
    counted = estimate_ingest(
        [chat("1", 4)], SETTINGS, RATES.ingest.model_copy(update={"extraction_prompt_ratio": 1.0})
    )
    scaled = estimate_ingest([chat("1", 4)], SETTINGS, RATES.ingest)
    assert scaled.extraction.prompt_tokens == round(counted.extraction.prompt_tokens * 1.2)
    assert scaled.extraction.completion_tokens == scaled.chunks * 300


def test_pairs_past_the_cap_no_longer_grow_with_the_chat() -> None:
    eager = RATES.ingest.model_copy(
        update={"entity_lookalike_rate": 0.2, "statement_overlap_rate": 0.3}
    )
    capped = dataclasses.replace(SETTINGS, max_llm_pairs=10)
    short = estimate_ingest([chat("1", 20)], capped, eager).resolution
    long = estimate_ingest([chat("1", 40)], capped, eager).resolution
    assert short == long  # every label at its cap in both
    # at most max_llm_pairs pairs per label reach the model, pairs_per_call to a call
    entity_pairs = eager.entity_labels_in_use * 10
    statement_pairs = eager.statement_labels_in_use * 10
    assert short.calls == math.ceil(entity_pairs / 20) + math.ceil(statement_pairs / 20)
    uncapped = estimate_ingest([chat("1", 40)], SETTINGS, eager).resolution
    assert uncapped.calls > long.calls and uncapped.tokens > long.tokens
    # the cap is per conversation: two capped conversations send twice the pairs
    both = estimate_ingest([chat("1", 20), twin(chat("1", 20), "2")], capped, eager).resolution
    assert both == short + short


@pytest.mark.parametrize("max_steps", [1, 2, 6])
@pytest.mark.parametrize("calls_per_question", [1, 2.5, 4, 50])
def test_agent_calls_never_pass_the_step_limit_and_scale_with_the_questions(
    max_steps: int, calls_per_question: float
) -> None:
    rates = RATES.agent.model_copy(update={"calls_per_question": calls_per_question})
    asked = [question("1", i=i) for i in range(4)]
    items = {"1": 500.0}
    four = estimate_answer(asked, max_steps, rates, AGENT.text, items)
    # a question makes at most max_steps tool turns and its final answer
    assert four.calls <= len(asked) * (max_steps + 1)
    assert four.calls == round(len(asked) * min(calls_per_question, max_steps + 1))
    eight = estimate_answer(asked + asked, max_steps, rates, AGENT.text, items)
    assert eight == four + four


def test_judge_calls_are_the_rubric_items_plus_the_event_ordering_calls() -> None:
    plain = [question("1", i=i) for i in range(2)]
    event = question("1", "event_ordering")
    rubrics = [rubric(plain[0], 3), rubric(plain[1], 2), rubric(event, 4)]
    judged = estimate_judge(rubrics, {q.id: q.question for q in [*plain, event]}, RATES.judge)
    assert judged.calls == 3 + 2 + round(4 * RATES.judge.event_calls_per_item)
    assert judged.completion_tokens == round(judged.calls * RATES.judge.completion_tokens_per_call)
    doubled = estimate_judge(
        rubrics + rubrics, {q.id: q.question for q in [*plain, event]}, RATES.judge
    )
    assert doubled == judged + judged


NUMERIC_RATES = [
    (section, name)
    for section in ("ingest", "agent", "judge")
    for name in type(getattr(RATES, section)).model_fields
    # Label spreads are no scale: a wider spread means fewer same-label pairs while uncapped but
    # more labels to fill once capped; test_a_wider_label_spread_means_fewer_pairs covers them.
    if not name.endswith("labels_in_use")
]


@pytest.mark.parametrize(("section", "name"), NUMERIC_RATES)
def test_every_phase_grows_with_each_rate_and_the_rate_is_used(section: str, name: str) -> None:
    """A small and a large conversation (tool results a share of the graph in one, at the cap
    in the other), with an event-ordering question: every rate has something to act on."""
    small, large = chat("1", 1, messages=2), chat("2", 30)
    asked = [question("1"), question("2"), question("2", "event_ordering")]
    rubrics = [rubric(q, 3) for q in asked]
    base = all_phases([small, large], asked, rubrics)
    value = getattr(getattr(RATES, section), name)
    field = type(getattr(RATES, section)).model_fields[name]
    ceiling = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    raised = value * 1.5 + 1
    if ceiling is not None:
        raised = min(raised, ceiling)
    assert raised > value
    rates = RATES.model_copy(
        update={section: getattr(RATES, section).model_copy(update={name: raised})}
    )
    bumped = all_phases([small, large], asked, rubrics, rates)
    for phase in base:
        assert bumped[phase].calls >= base[phase].calls, phase
        assert bumped[phase].tokens >= base[phase].tokens, phase
    assert sum(p.tokens for p in bumped.values()) > sum(p.tokens for p in base.values()), (
        f"{section}.{name} changes no estimate"
    )


def test_a_wider_label_spread_means_fewer_pairs_until_the_cap() -> None:
    chats = [chat("1", 30)]
    narrow, wide = (
        estimate_ingest(
            chats, SETTINGS, RATES.ingest.model_copy(update={"entity_labels_in_use": n})
        )
        for n in (1.0, 5.0)
    )
    assert wide.resolution.calls < narrow.resolution.calls


# ---------------------------------------------------------------------------------------------
# Rates from a run's files
# ---------------------------------------------------------------------------------------------


def test_fit_rate_finds_the_rate_that_gives_the_target() -> None:
    def pairs(rate: float) -> float:
        return entity_pairs_in_label(200, rate, 3)

    assert fit_rate(pairs, pairs(0.013)) == pytest.approx(0.013, rel=1e-6)
    assert fit_rate(pairs, 0) == 0
    assert fit_rate(pairs, 10**9) == 1  # out of reach: the bound, not a loop


def _trace(q: Question, calls: int, base: int, step: int, rows: int) -> Trace:
    """A trace whose call k had a prompt of base + k·step tokens, each tool turn `rows` rows."""
    prompts = [base + k * step for k in range(calls)]
    return Trace(
        question_id=q.id,
        answer="The garden plan started in March.",
        tool_calls=[
            ToolCallRecord(
                name="search_memory",
                arguments={},
                raw_arguments="{}",
                ids=[f"n{turn}:{r}" for r in range(rows)],
                message_ids=[],
                result="{}",
                turn=turn,
            )
            for turn in range(calls - 1)
        ],
        turn_texts=[""] * (calls - 1),
        reached_ids=[],
        reached_message_ids=[],
        steps=calls - 1,
        calls=calls,
        prompt_tokens=sum(prompts),
        completion_tokens=50 * calls,
        max_context_tokens=prompts[-1],
        test_model=False,
    )


def test_agent_rates_recover_the_step_and_the_per_call_overhead_from_the_prompts() -> None:
    asked = [question("1", i=i) for i in range(3)]
    fixed = count_tokens(AGENT.text) + count_tokens(asked[0].question)
    traces = [_trace(q, 3, base=fixed + 700, step=400, rows=8) for q in asked]
    rates, origins = agent_rates_from_run(traces, asked, {"1": 20.0}, RATES.agent)
    assert rates.calls_per_question == 3
    assert rates.overhead_tokens_per_call == pytest.approx(700)
    assert rates.tokens_per_result_row == pytest.approx(400 / 8)
    assert rates.completion_tokens_per_call == 50
    # 20 items: a small graph (20 × 0.2 < 10 rows): 8 rows a turn is a share of it
    assert rates.result_match_share == pytest.approx(8 / 20)
    assert origins["result_match_share"].source == "run"
    assert origins["result_rows_per_step"].source == "params"
    # fed back, the estimator gives the run's own calls and prompt tokens
    again = estimate_answer(asked, 6, rates, AGENT.text, {"1": 20.0})
    assert again.calls == sum(t.calls for t in traces)
    assert again.prompt_tokens == pytest.approx(sum(t.prompt_tokens for t in traces), abs=2)


def test_agent_rates_of_a_large_graph_measure_the_row_cap_instead() -> None:
    asked = [question("1")]
    traces = [_trace(asked[0], 4, base=2_000, step=600, rows=12)]
    rates, origins = agent_rates_from_run(traces, asked, {"1": 5_000.0}, RATES.agent)
    assert rates.result_rows_per_step == 12
    assert origins["result_rows_per_step"].source == "run"
    assert origins["result_match_share"].source == "params"


def test_an_agent_that_never_called_a_tool_keeps_the_row_rates_of_params() -> None:
    asked = [question("1")]
    traces = [_trace(asked[0], 1, base=900, step=0, rows=0)]
    rates, origins = agent_rates_from_run(traces, asked, {"1": 20.0}, RATES.agent)
    assert rates.calls_per_question == 1
    for name in ("result_rows_per_step", "result_match_share", "tokens_per_result_row"):
        assert getattr(rates, name) == getattr(RATES.agent, name)
        assert origins[name].source == "params" and "no tool call" in origins[name].basis


def _graphs(chats: Sequence[ChatSlice], **totals: float) -> dict[str, Any]:
    counts = {f"conv{c.conversation_id}": dict(totals) for c in chats}
    for c in chats:
        counts[f"conv{c.conversation_id}"]["chunks"] = len(chunk_conversation(c, 200))
    total = {
        k: sum(v[k] for v in counts.values()) for k in counts[f"conv{chats[0].conversation_id}"]
    }
    return {"total": total, **counts}


def test_ingest_rates_are_the_graph_counts_per_chunk_and_pairs_fitted_before_the_cap() -> None:
    chats = [chat("1", 10)]
    chunks = len(chunk_conversation(chats[0], 200))
    graphs = _graphs(
        chats,
        entities=3 * chunks - 6,
        resolution_pairs_merged=6,
        statements=5 * chunks,
        entities_person=3 * chunks - 6,
        statements_fact=2 * chunks,
        statements_measure=2 * chunks,
        statements_event=chunks,
        resolution_pairs_considered=40,
        resolution_pairs_sent=25,
        link_pairs_considered=60,
        link_pairs_sent=30,
    )
    usage = {
        "extraction": {
            "calls": chunks,
            "prompt_tokens": 1_000 * chunks,
            "completion_tokens": 250 * chunks,
        },
        "resolution": {"calls": 4, "prompt_tokens": 9_000, "completion_tokens": 550},
    }
    rates, origins = ingest_rates_from_run(
        chats, MemorySizes.from_json(graphs), usage, SETTINGS, RATES.ingest
    )
    assert rates.entities_per_chunk == pytest.approx(3)  # before the merges
    assert rates.statements_per_chunk == pytest.approx(5)
    assert rates.updatable_share == pytest.approx(4 / 5)  # Event is not updatable
    assert rates.entity_labels_in_use == 1
    assert rates.statement_labels_in_use == pytest.approx(2)
    assert rates.extraction_completion_tokens == 250
    assert rates.completion_tokens_per_pair == pytest.approx(550 / 55)
    # the pair sizes keep params' ratio between them, scaled to the run's prompt tokens
    assert rates.tokens_per_statement_pair / rates.tokens_per_entity_pair == pytest.approx(80 / 30)
    # the fitted rates give the pairs the run found before the cap, in the estimator's shape
    found = entity_pairs_in_label(chunks * 3, rates.entity_lookalike_rate, 3)
    assert found == pytest.approx(40, rel=1e-6)
    found = 2 * statement_pairs_in_label(5 * 0.8 / 2, chunks, rates.statement_overlap_rate, 3)
    assert found == pytest.approx(60, rel=1e-6)
    assert {o.source for o in origins.values()} == {"run"}
    # fed back, one extraction call per chunk and the run's extraction tokens
    again = estimate_ingest(chats, SETTINGS, rates).extraction
    assert again.calls == chunks
    assert again.prompt_tokens == 1_000 * chunks and again.completion_tokens == 250 * chunks


def test_ingest_rates_refuse_a_run_whose_chunks_this_code_would_cut_differently() -> None:
    chats = [chat("1", 4)]
    graphs = _graphs(chats, entities=1, statements=1)
    graphs["conv1"]["chunks"] += 1
    with pytest.raises(DataError, match="other code or params"):
        ingest_rates_from_run(chats, MemorySizes.from_json(graphs), {}, SETTINGS, RATES.ingest)


def _judged(question: Question, calls: int) -> JudgedQuestion:
    return JudgedQuestion(
        question_id=question.id,
        ability=question.ability,
        score=1.0,
        score_excluding_known_bad=1.0,
        flags=[],
        evidence_recall=None,
        judge_calls=calls,
        score_beam_code=1.0,
    )


def _run_data(
    judged: list[JudgedQuestion],
    rubrics: list[Rubric],
    questions: list[Question],
    usage: dict[str, int],
) -> RunData:
    return RunData(
        label="folder test",
        params={},
        mode="lite",
        system="graphrag",
        models={"judge": "scripted/rules"},
        test_model=True,
        chats=[],
        questions=questions,
        rubrics=rubrics,
        traces=[_trace(q, 1, 100, 0, 0) for q in questions],
        judged=judged,
        usage={"judge": usage},
        files={},
    )


def test_judge_rates_measure_event_calls_and_the_prompt_ratio_and_round_trip() -> None:
    plain, event = question("1"), question("1", "event_ordering")
    rubrics = [rubric(plain, 3), rubric(event, 4)]
    judged = [_judged(plain, 3), _judged(event, 10)]
    run = _run_data(
        judged,
        rubrics,
        [plain, event],
        {"calls": 13, "prompt_tokens": 9_999, "completion_tokens": 390},
    )
    rates, origins = judge_rates_from_run(run, None, RATES.judge)
    assert rates.event_calls_per_item == pytest.approx(10 / 4)
    assert rates.completion_tokens_per_call == 30
    assert rates.answer_tokens == count_tokens("The garden plan started in March.")
    assert origins["prompt_ratio"].source == "run"
    again = estimate_judge(rubrics, {q.id: q.question for q in [plain, event]}, rates)
    assert again.calls == 13
    assert again.prompt_tokens == pytest.approx(9_999, abs=1)  # the count is rounded
    assert again.completion_tokens == 390


def test_a_run_without_event_ordering_keeps_its_rate_from_params_and_says_why() -> None:
    plain = question("1")
    judged = [_judged(plain, 3)]
    run = _run_data(
        judged,
        [rubric(plain, 3)],
        [plain],
        {"calls": 3, "prompt_tokens": 900, "completion_tokens": 60},
    )
    rates, origins = judge_rates_from_run(run, None, RATES.judge)
    assert rates.event_calls_per_item == RATES.judge.event_calls_per_item
    assert origins["event_calls_per_item"].source == "params"
    assert "no event-ordering question" in origins["event_calls_per_item"].basis


def _write_run(root: Path, without: str | None = None) -> None:
    q = question("1")
    files = {
        "params.yaml": "mode: lite\nsystem: graphrag\n",
        "data/slice/chats/conv1.json": chat("1", 1).model_dump_json(),
        "data/slice/questions.jsonl": q.model_dump_json() + "\n",
        "data/slice/rubrics.jsonl": rubric(q, 2).model_dump_json() + "\n",
        "data/answer/traces.jsonl": _trace(q, 1, 100, 0, 0).model_dump_json() + "\n",
        "data/judge/questions.jsonl": _judged(q, 2).model_dump_json() + "\n",
        "data/ingest/graphs.json": "{}",
    }
    for rel, text in files.items():
        if rel != without:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)


def test_a_run_folder_is_read_with_the_files_its_system_asks_for(tmp_path: Path) -> None:
    _write_run(tmp_path)
    run = read_run(RunFolder(tmp_path), lambda system: {"data/ingest/graphs.json": "ingest"})
    assert (run.mode, run.system) == ("lite", "graphrag")
    assert [c.conversation_id for c in run.chats] == ["1"]
    assert run.files == {"data/ingest/graphs.json": "{}"}
    assert str(tmp_path) in run.label


@pytest.mark.parametrize(
    ("missing", "stage"),
    [
        ("data/answer/traces.jsonl", "answer"),
        ("data/judge/questions.jsonl", "judge"),
        ("data/slice/rubrics.jsonl", "slice"),
        ("data/ingest/graphs.json", "ingest"),
    ],
)
def test_a_run_without_a_file_names_it_and_the_stage_that_writes_it(
    tmp_path: Path, missing: str, stage: str
) -> None:
    _write_run(tmp_path, without=missing)
    with pytest.raises(DataError, match=f"has no {missing} \\(the `{stage}` stage writes it\\)"):
        read_run(RunFolder(tmp_path), lambda system: {"data/ingest/graphs.json": "ingest"})


def test_a_run_without_its_slices_says_so(tmp_path: Path) -> None:
    _write_run(tmp_path, without="data/slice/chats/conv1.json")
    with pytest.raises(DataError, match="no conversation slices in data/slice/chats"):
        read_run(RunFolder(tmp_path), lambda system: {})


def test_rates_of_another_systems_run_keep_its_build_and_answer_rates_from_params() -> None:
    from commands.estimate import rates_from_run
    from systems.no_memory import NoMemory
    from systems.rag import Rag

    plain = question("1")
    judged = [_judged(plain, 3)]
    usage = {"calls": 3, "prompt_tokens": 900, "completion_tokens": 60}
    run = dataclasses.replace(_run_data(judged, [rubric(plain, 3)], [plain], usage), system="rag")
    found = rates_from_run(run, RATES, None, NoMemory(agent_rates=RATES.agent))
    assert found.rates.ingest == RATES.ingest and found.rates.agent == RATES.agent
    origin = found.origins["agent.completion_tokens_per_call"]
    assert origin.source == "params" and "the run is of system rag" in origin.basis
    assert found.origins["judge.completion_tokens_per_call"].source == "run"
    # a rag run estimating rag: its answer model's completion size is measured
    same = rates_from_run(run, RATES, None, Rag(chunk_tokens=100, top_k=3, agent_rates=RATES.agent))
    assert same.rates.agent.completion_tokens_per_call == 50  # _trace: 50 a call
    assert same.origins["agent.completion_tokens_per_call"].source == "run"
    assert same.origins["ingest.entities_per_chunk"].source == "params"
    assert set(same.origins) == {
        f"{section}.{name}"
        for section in ("ingest", "agent", "judge")
        for name in type(getattr(RATES, section)).model_fields
    }


def test_the_expected_graph_counts_its_nodes_and_the_chunks_text_exactly() -> None:
    conversation = chat("1", 6)
    chunks = chunk_conversation(conversation, SETTINGS.chunk_tokens)
    graph = estimate_ingest([conversation], SETTINGS, RATES.ingest).graphs["1"]

    expected = graph.expected()

    assert (expected["sessions"], expected["chunks"]) == (6, len(chunks))
    assert expected["entities"] == round(len(chunks) * RATES.ingest.entities_per_chunk)
    assert expected["nodes"] == round(1 + 2 * 6 + graph.items)  # conversation, session, document
    text = sum(len(c.text.encode("utf-8")) for c in chunks)
    assert expected["chunk_text_mb"] == round(text / 1e6, 2)


def test_the_memory_table_lists_each_conversation_then_the_largest_and_the_sum() -> None:
    memory = {
        "10": {"chunks": 5.0, "nodes": 40.0},
        "2": {"chunks": 7.0, "nodes": 30.0},
    }

    lines = format_memory(memory, "system graphrag").splitlines()

    assert lines[0] == "Expected memory per conversation (system graphrag):"
    assert [line.split() for line in lines[1:]] == [
        ["conversation", "chunks", "nodes"],
        ["2", "7.0", "30.0"],
        ["10", "5.0", "40.0"],
        ["largest", "7.0", "40.0"],
        ["all", "12.0", "70.0"],
    ]


def test_the_table_says_whether_the_run_fits_its_cap_or_that_the_tier_has_none() -> None:
    estimates = {"agent": RoleEstimate(3, 900, 100), "total": RoleEstimate(3, 900, 100)}

    assert format_table(estimates, 10, 2_000, "tier 100K, mode lite").endswith("within the cap")
    assert "OVER the cap" in format_table(estimates, 2, 2_000, "tier 100K, mode lite")
    no_cap = format_table(estimates, None, None, "tier 1M, mode all")
    assert no_cap.splitlines()[-1] == (
        "no cap set for this tier's mode yet: set settings.yaml budget.tiers.<tier>.<mode>"
    )
