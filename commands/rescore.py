"""rescore: another system's published answers judged by our judge (0 answer calls), and our
judge's agreement with its published item verdicts, per ability.

    python -m commands.rescore [--answers FILE] [--verdicts FILE] [--out DIR]

Reads the slice of the run's mode (`dvc repro slice`) and the benchmark's scorer prompts at their
pin (`dvc repro fetch`), Jelly's published answers and verdicts (pins.yaml `published.jelly-*`,
from ../shared/published by default; each checked against its pinned sha256), judges every answer
the slice has a question for with the judge model of params `models.judge`, and writes to
`reports/rescore/jelly-<mode>/`: record.json (what was measured, how the questions matched, calls
and tokens, scores), judgements.jsonl, agreement.md and rescore.md. Every question is counted:
matched, missing from the file, outside the mode's slice, or unmatched; none is dropped silently.
The core is bench/rescore.py; the judging is bench/judge.py's, as the judge stage runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.beam_code import beam_code_score
from bench.event_order import EVENT_ORDERING
from bench.judge import (
    Ask,
    JudgeCalls,
    judge_question,
    judge_questions,
    judged_question,
    summarize,
)
from bench.rescore import (
    TEST_MODEL_WARNING,
    judge_agreement,
    match_published,
    parse_jelly_answers,
    parse_jelly_verdicts,
    render_agreement,
    rescore_label,
)
from bench.scorer_prompts import item_messages
from bench.slice import parse_fixture
from bench.usage import CountedModel
from clients.files import read_jsonl, write_atomic, write_json, write_jsonl
from clients.llm.accounting import Accounting
from clients.llm.client import open_model
from schemas.errors import DataError, check_failed_share
from schemas.judging import Judgement
from schemas.layout import LAYOUT
from schemas.params import Params
from schemas.published import (
    RescoreRecord,
    check_published_bytes,
    question_id_from_jelly,
)
from schemas.records import ABILITIES, Question, Rubric
from stages.common import load_scorer_prompts, progress, read_params, run_stage

PUBLISHED = Path("../shared/published/jelly")
"""Where ../shared/published/README.md stages Jelly's repository files (their own paths)."""
ANSWERS_PIN, VERDICTS_PIN = "jelly-answers", "jelly-verdicts"


def read_pinned(params: Params, name: str, path: Path) -> str:
    pin = params.published.get(name)
    if pin is None:
        raise DataError(f"pins.yaml has no `published.{name}`")
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(
            f"{path} not found: pass its local copy ({pin.repo}@{pin.commit} {pin.path})"
        ) from exc
    check_published_bytes(name, pin.sha256, path, data)
    return data.decode("utf-8")


def all_question_ids(params: Params) -> list[str]:
    """Every question id of the tier (fixtures mode `all`), to tell an id outside this mode's slice
    from one that names no question."""
    path = Path(params.slice.fixtures[params.tier])
    return parse_fixture(path.read_bytes(), path).modes["all"].question_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=Path, default=None)
    parser.add_argument("--verdicts", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    run = read_params()
    answers_pin, verdicts_pin = run.published[ANSWERS_PIN], run.published[VERDICTS_PIN]
    answers_path = args.answers or PUBLISHED / answers_pin.path
    verdicts_path = args.verdicts or PUBLISHED / verdicts_pin.path
    out = args.out or Path("reports/rescore") / f"jelly-{run.mode}"
    answers = parse_jelly_answers(read_pinned(run, ANSWERS_PIN, answers_path), str(answers_path))
    verdicts = parse_jelly_verdicts(
        read_pinned(run, VERDICTS_PIN, verdicts_path), str(verdicts_path)
    )

    questions = read_jsonl(LAYOUT.slice.questions, Question)
    rubrics = {r.question_id: r for r in read_jsonl(LAYOUT.slice.rubrics, Rubric)}
    known = all_question_ids(run)
    index, matching = match_published(
        [a.their_id for a in answers], questions, question_id_from_jelly, known
    )
    verdict_index, _ = match_published(
        [v.their_id for v in verdicts], questions, question_id_from_jelly, known
    )
    matched = [q for q in questions if q.id in index]
    prompts = load_scorer_prompts(run.judge)

    accounting = Accounting()
    judge = open_model("judge", run, accounting=accounting)
    judge.check_endpoint()
    counted = CountedModel(judge)
    answer_of = {q.id: answers[index[q.id]].answer for q in matched}
    calls = JudgeCalls(counted, prompts)
    calls.send_items(
        [
            item_messages(prompts, q.question, item, answer_of[q.id])
            for q in matched
            if q.ability != EVENT_ORDERING
            for item in rubrics[q.id].rubric
        ]
    )

    def judge_one(q: Question, ask: Ask) -> Judgement:
        return judge_question(
            q,
            rubrics[q.id],
            answer_of[q.id],
            prompts,
            ask,
            max_equivalence_calls=run.judge.max_equivalence_calls,
        )

    judged = judge_questions(matched, judge_one, calls, concurrency=run.llm.concurrency)
    judgements = list(progress(judged, total=len(matched), desc="rescore"))
    failures = calls.failures
    judge_calls = sum(j.calls for j in judgements)
    check_failed_share(
        "rescore",
        "judge calls",
        len(failures),
        judge_calls,
        run.judge.max_failed_share,
        failures[-1] if failures else None,
    )

    theirs = {qid: verdicts[i] for qid, i in verdict_index.items()}
    agreement = judge_agreement(judgements, theirs)
    rows = [  # no retrieval to reach: evidence recall is not measured here
        judged_question(
            j,
            [],
            [],
            answer_failed=False,
            score_beam_code=beam_code_score(j, answer_of[j.question_id]),
        )
        for j in judgements
    ]
    summary = summarize(
        judgements, [rubrics[q.id] for q in matched], rows, failed_calls=len(failures)
    )
    their_scores = [theirs[j.question_id].score for j in judgements if j.question_id in theirs]
    usage = counted.usage()
    model = judge.metadata().model or f"{run.models.agent.model} (models.judge unset: the agent's)"
    record = RescoreRecord(
        measured=rescore_label(answers_pin.system, answers_pin.models, model),
        source=f"{answers_pin.repo}@{answers_pin.commit} {answers_pin.path}",
        source_sha256={
            ANSWERS_PIN: str(answers_pin.sha256),
            VERDICTS_PIN: str(verdicts_pin.sha256),
        },
        mode=run.mode,
        judge_model=model,
        test_model=judge.test_model,
        answer_calls=0,
        judge_calls=usage["calls"],
        failed_judge_calls=len(failures),
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        matching=matching,
        score=summary.overall.score,
        their_score=sum(their_scores) / len(their_scores) if their_scores else None,
        by_ability={
            a: {"questions": summary.abilities[a].questions, "score": summary.abilities[a].score}
            for a in ABILITIES
        },
        agreement=agreement,
    )
    write_jsonl(out / "judgements.jsonl", judgements)
    write_json(out / "record.json", record.model_dump(mode="json"))
    write_atomic(out / "agreement.md", render_agreement(agreement))
    write_atomic(out / "rescore.md", render_rescore(record))
    print(render_rescore(record), file=sys.stderr)


def _share(value: float | int | None) -> str:
    return "–" if value is None else f"{100 * float(value):.2f}"


def render_rescore(record: RescoreRecord) -> str:
    """The rescore's page: the label, the warning where the judge is the test model, the
    matching, calls and tokens, the scores per ability, and the agreement table."""
    m = record.matching
    lines = [
        "# Rescore",
        "",
        f"Measured: {record.measured}.",
        "",
    ]
    if record.test_model:
        lines += [f"**{TEST_MODEL_WARNING}**", ""]
    lines += [
        f"Source: {record.source}. Mode {record.mode}: {m.matched} questions matched, "
        f"{len(m.missing)} missing from the file"
        + (f" ({', '.join(m.missing[:5])})" if m.missing else "")
        + f", {m.outside_slice} outside this mode's slice, {len(m.unmatched)} unmatched"
        + (f" ({', '.join(m.unmatched[:5])})" if m.unmatched else "")
        + f", {len(m.duplicates)} duplicated.",
        "",
        f"Calls: {record.answer_calls} answer, {record.judge_calls} judge "
        f"({record.failed_judge_calls} failed); tokens: {record.prompt_tokens} prompt, "
        f"{record.completion_tokens} completion.",
        "",
        f"Score by our judge: {_share(record.score)}; their published score on the same "
        f"questions: {_share(record.their_score)}.",
        "",
        "| Ability | Questions | Our score |",
        "| --- | ---: | ---: |",
        *[
            f"| {a} | {v['questions']} | {_share(v['score'])} |"
            for a, v in record.by_ability.items()
        ],
        "",
        "## Our judge against theirs, item by item",
        "",
        render_agreement(record.agreement),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    run_stage(main)
