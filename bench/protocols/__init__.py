"""Scoring protocols: the same answers scored each protocol's own way (params `judge.protocols`).

- beam_code (bench/beam_code.py): the benchmark's own judge prompts and arithmetic, from the
  judge stage's verdicts (no call of its own);
- omnimemeval (bench/protocols/omnimemeval.py): MemTensor/OmniMemEval's judge;
- exabase (bench/protocols/exabase.py): ExaBase's prompts, as pastdotdev/benchmarks runs them.

Each protocol that judges reads its prompts from files at a pinned commit of its public
repository (pins.yaml `judge.protocol_sources`, fetched by the fetch stage, hash-checked here),
never from this repository. `score_protocol` scores one protocol; `protocol_summary` sums it up
with its label (bench/protocols/label.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bench.protocols import exabase, omnimemeval
from bench.protocols.base import (
    ProtocolAsk,
    ProtocolJudge,
    ScoringProtocol,
    check_source,
    source_version,
    summarize_protocol,
)
from bench.protocols.calls import judge_all
from bench.protocols.label import protocol_label
from schemas.errors import DataError
from schemas.judging import JudgedQuestion
from schemas.protocols import PinnedSource, ProtocolName, ProtocolQuestion, ProtocolScores
from schemas.records import Question, Rubric

BEAM_CODE = ScoringProtocol(
    name="beam_code",
    title="BEAM code",
    published_judge="gpt-4.1-mini (the paper's)",
    judge_prompt="the benchmark's own (src/prompts.py, its question slot filled)",
    item_scale="0 / 0.5 / 1 truncated with int() (0.5 counts 0), as its compute_metrics.py",
    event_formula="(tau_b + 1) / 2 over the equivalence alignment (bench/beam_code.py)",
    aggregate="micro",
    read_judge=None,
)

PROTOCOLS: dict[ProtocolName, ScoringProtocol] = {
    "beam_code": BEAM_CODE,
    "omnimemeval": omnimemeval.PROTOCOL,
    "exabase": exabase.PROTOCOL,
}


def protocol_judge(
    name: ProtocolName, pin: PinnedSource, contents: Mapping[str, bytes]
) -> ProtocolJudge:
    """A protocol's judge from the bytes of its pinned files (hash-checked, parsed)."""
    protocol = PROTOCOLS[name]
    if protocol.read_judge is None:
        raise DataError(f"protocol {name} makes no calls of its own; it has no judge to read")
    return protocol.read_judge(check_source(name, pin, contents), source_version(name, pin))


def beam_code_questions(rows: Sequence[JudgedQuestion]) -> list[ProtocolQuestion]:
    """beam_code's score of each question, as the judge stage computed it from its verdicts."""
    return [
        ProtocolQuestion(
            protocol="beam_code",
            question_id=r.question_id,
            ability=r.ability,
            score=r.score_beam_code,
            calls=0,
            failed_calls=0,
            detail="from the judge stage's verdicts",
        )
        for r in rows
    ]


def score_protocol(
    judge: ProtocolJudge,
    name: ProtocolName,
    questions: Sequence[Question],
    rubrics: Mapping[str, Rubric],
    answers: Mapping[str, str | None],
    ask: ProtocolAsk,
    *,
    concurrency: int,
) -> list[ProtocolQuestion]:
    """Every question scored under one protocol. `answers` maps a question to its answer, None
    where the answer failed: such a question scores 0 without a call (a fragment is no answer)."""

    def judge_one(question: Question, ask: ProtocolAsk) -> ProtocolQuestion:
        answer = answers[question.id]
        if answer is None:
            return ProtocolQuestion(
                protocol=name,
                question_id=question.id,
                ability=question.ability,
                score=0.0,
                calls=0,
                failed_calls=0,
                detail="not judged: the answer failed",
            )
        return judge.judge_question(question, rubrics[question.id], answer, ask)

    return judge_all(questions, judge_one, ask, concurrency=concurrency)


def protocol_summary(
    name: ProtocolName,
    rows: Sequence[ProtocolQuestion],
    *,
    source: str,
    judge_model: str,
    test_model: bool,
    incomplete: str | None,
) -> ProtocolScores:
    """One protocol's scores with its label."""
    protocol = PROTOCOLS[name]
    comparable, label = protocol_label(
        protocol, incomplete=incomplete, judge_model=judge_model, test_model=test_model
    )
    return summarize_protocol(
        protocol,
        rows,
        source=source,
        judge_model=judge_model,
        paper_comparable=comparable,
        label=label,
    )
