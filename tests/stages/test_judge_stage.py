"""The judge stage's shell: evidence recall, and `python -m stages.judge` in a temporary folder.

The process tests are marked slow (each start imports scipy and the stage: about 5 s here).
The event-ordering questions are judged `llm.concurrency` at a time (bench/judge.py
`judge_questions`): at 1 and at 8 every out is the same bytes, and served with a latency their
equivalence calls overlap.

The folder holds the scorer stand-in files (tests/support/scorer_standin.py) with params pinned to
their hashes, a hand-made slice (questions and rubrics, made-up text) and hand-made traces, and
uses the scripted test model as the judge, so the process runs offline in a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.judge import evidence_recall
from schemas.judging import Judgement
from schemas.records import ABILITIES, Question, Rubric
from schemas.traces import Trace
from tests.support.models import scripted_models
from tests.support.params import repo_params
from tests.support.scorer_standin import (
    PROMPTS_PATH,
    standin_judge_pins,
    write_standin,
)

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

# -- evidence recall on hand cases --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sources", "reached", "expected"),
    [
        ([1, 2, 3, 4], [2, 4, 9], 0.5),  # half the sources, an extra message does not count
        ([5], [], 0.0),  # nothing reached
        ([5, 7], [7, 5, 5], 1.0),  # order and repeats do not matter
        ([1, 1, 2], [1], 0.5),  # a repeated source counts once
        ([], [1, 2], None),  # no source messages (abstention): not a number
    ],
)
def test_evidence_recall_on_hand_cases(
    sources: list[int], reached: list[int], expected: float | None
) -> None:
    assert evidence_recall(sources, reached) == expected


# -- the stage as a process ---------------------------------------------------------------------

QUESTIONS = [
    Question(
        id="conv3:information_extraction:0",
        conversation_id="3",
        ability="information_extraction",
        index=0,
        question="What is my monthly grocery budget?",
    ),
    Question(
        id="conv3:abstention:0",
        conversation_id="3",
        ability="abstention",
        index=0,
        question="What is the name of my landlord?",
    ),
    Question(
        id="conv3:event_ordering:0",
        conversation_id="3",
        ability="event_ordering",
        index=0,
        question="In what order did the apartment events happen?",
    ),
    Question(
        id="conv3:temporal_reasoning:0",
        conversation_id="3",
        ability="temporal_reasoning",
        index=0,
        question="How long after moving in did I sign the lease?",
    ),
]
RUBRICS = [
    Rubric(
        question_id="conv3:information_extraction:0",
        ability="information_extraction",
        rubric=["monthly grocery budget 550 dollars", "Riverside apartment"],
        source_chat_ids=[0, 4],
    ),
    Rubric(
        question_id="conv3:abstention:0",
        ability="abstention",
        rubric=["landlord name unknown memory"],
        source_chat_ids=[],
        known_bad_rubric=True,
        known_bad_reason="made-up reason for the test",
    ),
    Rubric(
        question_id="conv3:event_ordering:0",
        ability="event_ordering",
        rubric=["moved into the Riverside apartment", "signed the apartment lease"],
        source_chat_ids=[5, 7],
    ),
    Rubric(
        question_id="conv3:temporal_reasoning:0",
        ability="temporal_reasoning",
        rubric=["three weeks after moving"],
        source_chat_ids=[5, 7],
    ),
]
ANSWERS = {  # question id -> (answer, reached message ids, error)
    "conv3:information_extraction:0": ("The monthly grocery budget is 550 dollars.", [4, 9], None),
    "conv3:abstention:0": ("The landlord name is unknown: the memory has nothing.", [], None),
    "conv3:event_ordering:0": (
        "1. moved into the Riverside apartment\n2. signed the apartment lease",
        [5, 7],
        None,
    ),
    "conv3:temporal_reasoning:0": ("", [5], "ServiceError: the agent's model is unreachable"),
}


def trace_for(question_id: str) -> Trace:
    answer, reached, error = ANSWERS[question_id]
    return Trace(
        question_id=question_id,
        answer=answer,
        tool_calls=[],
        turn_texts=[],
        reached_ids=[],
        reached_message_ids=reached,
        steps=0,
        calls=1,
        prompt_tokens=10,
        completion_tokens=5,
        max_context_tokens=10,
        test_model=True,
        error=error,
    )


def write_lines(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(row.model_dump_json() + "\n" for row in rows), encoding="utf-8")


def make_workdir(
    root: Path,
    questions: list[Question] = QUESTIONS,
    rubrics: list[Rubric] = RUBRICS,
    traces: list[Trace] | None = None,
    **sections: dict[str, Any],
) -> Path:
    """`root/repo` laid out as the judge stage expects to find its inputs; `sections` are merged
    over the params' sections (e.g. `llm={"concurrency": 8}`)."""
    work = root / "repo"
    params = repo_params()
    params["mode"] = "lite"
    params["judge"] |= standin_judge_pins()
    params["models"] = scripted_models()
    params["llm"] |= {"cache_dir": str(root / "llm-cache")}
    for name, values in sections.items():
        params[name] = params[name] | values
    work.mkdir(parents=True)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    write_standin(work / "data" / "scorer")
    write_lines(work / "data" / "slice" / "questions.jsonl", questions)
    write_lines(work / "data" / "slice" / "rubrics.jsonl", rubrics)
    if traces is None:
        traces = [trace_for(q.id) for q in questions]
    write_lines(work / "data" / "answer" / "traces.jsonl", traces)
    return work


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    """A folder laid out as the judge stage expects to find its inputs."""
    return make_workdir(tmp_path)


def run_judge(work: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "PYTHONPATH"))}
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "BEAM_SCRIPTED_RECORD": str(work.parent / "calls.jsonl"),
        **env_vars,
    }
    return subprocess.run(
        [sys.executable, "-m", "stages.judge"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_judge_stage_writes_judgements_rows_and_metrics(workdir: Path) -> None:
    done = run_judge(workdir)
    assert done.returncode == 0, done.stderr
    out = workdir / "data" / "judge"

    judgements = [
        Judgement.model_validate_json(line)
        for line in (out / "judgements.jsonl").read_text().splitlines()
    ]
    assert [j.question_id for j in judgements] == [q.id for q in QUESTIONS]
    by_id = {j.question_id: j for j in judgements}
    extraction = by_id["conv3:information_extraction:0"]
    assert [i.score for i in extraction.items] == [1.0, 0.0]  # budget named, apartment not
    assert extraction.score == 0.5 and extraction.calls == 2
    assert all(i.reply and '"score"' in i.reply for i in extraction.items)  # raw reply kept
    assert by_id["conv3:event_ordering:0"].event is not None
    assert by_id["conv3:event_ordering:0"].calls >= 2
    assert "known_bad_rubric" in by_id["conv3:abstention:0"].flags

    rows = {
        r["question_id"]: r
        for r in (json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines())
    }
    assert list(rows) == [q.id for q in QUESTIONS]
    assert rows["conv3:information_extraction:0"]["evidence_recall"] == 0.5
    assert rows["conv3:abstention:0"]["evidence_recall"] is None
    assert rows["conv3:event_ordering:0"]["evidence_recall"] == 1.0
    assert rows["conv3:temporal_reasoning:0"]["evidence_recall"] == 0.5
    assert rows["conv3:abstention:0"]["score"] == 1.0  # every rubric word is in the answer
    assert rows["conv3:abstention:0"]["score_excluding_known_bad"] is None
    assert rows["conv3:temporal_reasoning:0"]["flags"] == ["error"]  # the agent's failure
    assert sum(r["judge_calls"] for r in rows.values()) == sum(j.calls for j in judgements)

    metrics = json.loads((out / "summary.json").read_text())
    assert set(metrics) == {*ABILITIES, "overall"}
    for ability in ABILITIES:
        assert {"score", "questions", "evidence_recall", "error_questions"} <= set(metrics[ability])
    assert metrics["preference_following"]["questions"] == 0
    assert metrics["preference_following"]["score"] is None
    overall = metrics["overall"]
    scores = [r["score"] for r in rows.values()]
    kept = [r["score"] for r in rows.values() if r["score_excluding_known_bad"] is not None]
    assert overall["score"] == pytest.approx(sum(scores) / 4)
    assert overall["score_excluding_known_bad"] == pytest.approx(sum(kept) / 3)
    assert overall["score_excluding_known_bad"] != pytest.approx(overall["score"])
    assert metrics["abstention"]["score"] == 1.0
    assert metrics["abstention"]["score_excluding_known_bad"] is None
    assert overall["evidence_recall"] == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    assert metrics["abstention"]["evidence_recall"] is None
    assert overall["error_questions"] == 1 and metrics["temporal_reasoning"]["error_questions"] == 1
    assert overall["judge_calls"] == sum(j.calls for j in judgements)
    run = json.loads((out / "run.json").read_text())
    assert run["test_model"] is True and run["models"][0]["judge_is_agent"] is True
    usage = json.loads((workdir / "metrics" / "usage" / "judge.json").read_text())
    assert usage["judge"]["calls"] == overall["judge_calls"]
    assert usage["judge"]["prompt_tokens"] > 0
    # the stage's wall-time file holds its seconds only
    timing = json.loads((workdir / "metrics" / "wall_time" / "judge.json").read_text())
    assert list(timing) == ["seconds"] and list(timing["seconds"]) == ["judge", "stage_judge"]

    # the scripted judge saw the question, the rubric item and the answer in each item prompt
    calls = [json.loads(line) for line in (workdir.parent / "calls.jsonl").read_text().splitlines()]
    item_prompts = [c["messages"][-1]["content"] for c in calls if c["task"] == "judge"]
    # 2 + 1 rubric items outside event ordering; the failed answer's item goes to no judge
    assert len(item_prompts) == 3
    failed = by_id["conv3:temporal_reasoning:0"]
    assert failed.calls == 0 and failed.score == 0.0
    assert any(
        "What is my monthly grocery budget?" in p and "Riverside apartment" in p
        for p in item_prompts
    )


@pytest.mark.slow
def test_a_second_run_makes_no_model_call_and_identical_outputs(workdir: Path) -> None:
    assert run_judge(workdir).returncode == 0
    names = sorted(p.name for p in (workdir / "data" / "judge").iterdir())
    assert names == [
        "judgements.jsonl",
        "protocol_questions.jsonl",
        "protocols.json",
        "questions.jsonl",
        "run.json",
        "summary.json",
    ]
    first = {n: (workdir / "data" / "judge" / n).read_bytes() for n in names}
    usage = (workdir / "metrics" / "usage" / "judge.json").read_bytes()
    assert run_judge(workdir).returncode == 0
    # served from the call cache: every out the same bytes, the calls and tokens counted alike
    assert {n: (workdir / "data" / "judge" / n).read_bytes() for n in names} == first
    assert (workdir / "metrics" / "usage" / "judge.json").read_bytes() == usage
    metrics = json.loads((workdir / "metrics" / "wall_time" / "judge.json").read_text())
    assert metrics["seconds"]["judge"] == 0.0  # no call waited on the model
    assert metrics["seconds"]["stage_judge"] > 0  # the stage's own wall time


@pytest.mark.slow
def test_a_tampered_scorer_file_stops_the_stage_with_exit_2(workdir: Path) -> None:
    target = workdir / "data" / "scorer" / PROMPTS_PATH
    target.write_text(target.read_text() + "\n# edited\n")
    done = run_judge(workdir)
    assert done.returncode == 2
    assert "differs from the pin" in done.stderr and "dvc repro fetch" in done.stderr
    assert PROMPTS_PATH in done.stderr
    assert not (workdir / "data" / "judge").exists()
    assert not (workdir / "metrics" / "wall_time" / "judge.json").exists()


@pytest.mark.slow
def test_a_question_without_a_trace_stops_the_stage_with_exit_2(workdir: Path) -> None:
    traces = workdir / "data" / "answer" / "traces.jsonl"
    traces.write_text("".join(traces.read_text().splitlines(keepends=True)[:-1]))
    done = run_judge(workdir)
    assert done.returncode == 2
    assert "conv3:temporal_reasoning:0" in done.stderr and "dvc repro answer" in done.stderr


# -- event ordering on threads: the outs of a serial run ----------------------------------------

EVENT_RUBRICS = [
    ["moved into the Riverside apartment", "signed the apartment lease", "painted the kitchen"],
    ["booked the Lisbon flight", "renewed the passport", "packed the travel bags"],
    ["adopted a puppy", "bought a dog crate", "hired a dog trainer", "won a ribbon"],
]
EVENT_ANSWERS = [  # lines out of order, lines matching nothing, one answer repeated
    "1. painted the kitchen\n2. moved into the Riverside apartment\n3. a walk in the park",
    "- packed the travel bags\n- booked the Lisbon flight\n- renewed the passport",
    "won a ribbon\nbought a dog crate\nadopted a puppy\nthe vet visit\nhired a dog trainer",
    "1. painted the kitchen\n2. moved into the Riverside apartment\n3. a walk in the park",
    "renewed the passport",
    "hired a dog trainer\nadopted a puppy",
]


def event_inputs() -> tuple[list[Question], list[Rubric], list[Trace]]:
    """The hand-made questions with six event-ordering ones (answers in EVENT_ANSWERS, over the
    rubrics in turn; the fifth's answer failed, so it makes no call)."""
    questions, rubrics = list(QUESTIONS), list(RUBRICS)
    traces = [trace_for(q.id) for q in QUESTIONS]
    for n, answer in enumerate(EVENT_ANSWERS):
        qid = f"conv{n + 4}:event_ordering:0"
        questions.append(
            Question(
                id=qid,
                conversation_id=str(n + 4),
                ability="event_ordering",
                index=0,
                question="In what order did these happen?",
            )
        )
        rubrics.append(
            Rubric(
                question_id=qid,
                ability="event_ordering",
                rubric=EVENT_RUBRICS[n % 3],
                source_chat_ids=[1],
            )
        )
        error = "ServiceError: the agent's model is unreachable" if n == 4 else None
        traces.append(trace_for(questions[0].id).model_copy(update={"question_id": qid}))
        traces[-1] = traces[-1].model_copy(
            update={"answer": "" if error else answer, "error": error}
        )
    return questions, rubrics, traces


def outs(work: Path) -> dict[str, bytes]:
    """Every out of the judge but its wall time: data/judge/* and metrics/usage/judge.json."""
    files = sorted((work / "data" / "judge").iterdir())
    found = {f"data/judge/{f.name}": f.read_bytes() for f in files}
    usage = work / "metrics" / "usage" / "judge.json"
    return found | {"metrics/usage/judge.json": usage.read_bytes()}


@pytest.mark.slow
def test_the_outs_are_the_same_bytes_at_concurrency_1_and_8(tmp_path: Path) -> None:
    questions, rubrics, traces = event_inputs()
    runs: dict[int, dict[str, bytes]] = {}
    requests: dict[int, list[str]] = {}
    for concurrency in (1, 8):
        work = make_workdir(
            tmp_path / f"c{concurrency}",
            questions,
            rubrics,
            traces,
            llm={"concurrency": concurrency},
            judge={"max_equivalence_calls": 5},
        )
        done = run_judge(work)
        assert done.returncode == 0, done.stderr
        runs[concurrency] = outs(work)
        lines = (work.parent / "calls.jsonl").read_text().splitlines()
        requests[concurrency] = sorted(lines)
    assert runs[8] == runs[1]
    assert requests[8] == requests[1]  # the same calls, each once (the call cache was empty)
    judgements = [
        Judgement.model_validate_json(line)
        for line in runs[1]["data/judge/judgements.jsonl"].decode().splitlines()
    ]
    events = {j.question_id: j for j in judgements if j.ability == "event_ordering"}
    assert [j.question_id for j in judgements] == [q.id for q in questions]
    assert any("call_cap_reached" in j.flags for j in events.values())  # the cap held alike
    assert events["conv8:event_ordering:0"].calls == 0  # the failed answer asked nothing
    # the repeated answer asked what the first had asked: no request of its own
    equivalence = [json.loads(line) for line in requests[1] if '"equivalence"' in line]
    asked = sum(j.calls for j in events.values())
    assert len(equivalence) <= asked - events["conv7:event_ordering:0"].calls


@pytest.mark.slow
def test_served_with_a_latency_the_equivalence_calls_overlap(tmp_path: Path) -> None:
    """Through litellm to the scripted server answering after 0.3 s: at concurrency 8 several
    questions' equivalence calls are in flight at once, and the judgements are the serial
    in-process run's."""
    from tests.support.scripted_server import ServerProcess

    questions, rubrics, traces = event_inputs()
    serial = make_workdir(tmp_path / "serial", questions, rubrics, traces, llm={"concurrency": 1})
    assert run_judge(serial).returncode == 0
    with ServerProcess(tmp_path / "served.jsonl", latency=0.3) as server:
        endpoint = {"model": "openai/test-model", "api_base": server.api_base}
        work = make_workdir(
            tmp_path / "served",
            questions,
            rubrics,
            traces,
            llm={"concurrency": 8},
            models={"agent": endpoint},
        )
        done = run_judge(work, OPENAI_API_KEY="dummy")
        assert done.returncode == 0, done.stderr
        log = [e for e in server.requests() if e.task == "equivalence"]
    assert log and all(e.outcome == "ok" for e in log)
    in_flight = max(sum(o.started <= e.started < o.ended for o in log) for e in log)
    assert in_flight > 1
    for name in ("judgements.jsonl", "questions.jsonl", "summary.json"):
        want = (serial / "data" / "judge" / name).read_bytes()
        assert (work / "data" / "judge" / name).read_bytes() == want, name


@pytest.mark.slow
def test_judge_stage_scores_every_protocol_of_the_params(tmp_path: Path) -> None:
    """beam_code from the stage's verdicts, omnimemeval and exabase each with its own prompts
    (the stand-ins, read where the fetch stage puts them), through the same judge model."""
    from schemas.layout import LAYOUT
    from schemas.protocols import ProtocolQuestion, ProtocolsSummary
    from tests.support.protocol_standin import standin_protocol_files, standin_protocol_pins

    protocols = ["beam_code", "omnimemeval", "exabase"]
    work = make_workdir(
        tmp_path, judge={"protocols": protocols, "protocol_sources": standin_protocol_pins()}
    )
    for name, files in standin_protocol_files().items():
        for path, data in files.items():
            target = work / LAYOUT.fetch.protocol_file(name, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    done = run_judge(work)
    assert done.returncode == 0, done.stderr
    out = work / "data" / "judge"
    summary = ProtocolsSummary.model_validate_json((out / "protocols.json").read_text())
    assert [p.protocol for p in summary.protocols] == protocols
    rows = [
        ProtocolQuestion.model_validate_json(line)
        for line in (out / "protocol_questions.jsonl").read_text().splitlines()
    ]
    assert [(r.protocol, r.question_id) for r in rows] == [
        (p, q.id) for p in protocols for q in QUESTIONS
    ]
    by = {(r.protocol, r.question_id): r for r in rows}
    judged = json.loads((out / "summary.json").read_text())
    beam_code = summary.protocols[0]
    assert beam_code.micro == pytest.approx(judged["overall"]["score_beam_code"])
    # the failed answer scores 0 without a call under every protocol
    for p in protocols:
        failed = by[(p, "conv3:temporal_reasoning:0")]
        assert failed.score == 0.0 and failed.calls == 0
    # each protocol's calls went to the judge under its own task, with its own prompts
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    tasks = {c["task"] for c in calls}
    assert {"omnimemeval_judge", "omnimemeval_order", "exabase_judge"} <= tasks
    omni_items = [c for c in calls if c["task"] == "omnimemeval_judge"]
    assert all("Stand-in item grader" in c["messages"][-1]["content"] for c in omni_items)
    assert by[("omnimemeval", "conv3:event_ordering:0")].calls == 1
    assert by[("exabase", "conv3:event_ordering:0")].calls >= 1
    for scores in summary.protocols:
        assert not scores.paper_comparable  # lite, and a test model judged
        assert scores.judge_model == "scripted/rules"
        assert scores.micro == pytest.approx(
            sum(by[(scores.protocol, q.id)].score for q in QUESTIONS) / len(QUESTIONS)
        )
    usage = json.loads((work / "metrics" / "usage" / "judge.json").read_text())
    assert usage["judge"]["calls"] == judged["overall"]["judge_calls"] + sum(r.calls for r in rows)
