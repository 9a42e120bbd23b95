"""The run viewer without a browser: the page's data, the escaping of untrusted text, the page's
policy, and the viewer command (`commands.viewer.write_page`) over a small run laid out in a
temporary folder. The page in a real browser, on a real lite run, is
tests/browser/test_viewer_page.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.judge import summarize
from bench.report import count_flags, score_table
from bench.viewer.data import EVIDENCE_CHARS, REACHED_CHARS
from bench.viewer.page import CSS, SCRIPT, embed_json, render_page
from clients.files import write_json, write_jsonl
from commands import viewer as viewer_command
from schemas.errors import DataError
from schemas.headline import Headline
from schemas.judge_check import JudgeCheckSummary
from schemas.judging import EventAlignment, EventScores, ItemScore, JudgedQuestion, Judgement
from schemas.params import ReportParams
from schemas.records import ChatMessage, ChatSlice, Question, Rubric, Session
from schemas.roles import COST_KEYS
from schemas.run_record import CostRow, Failures, RunRecord
from schemas.runs import ModelUse, RunSummary
from schemas.traces import ToolCallRecord, Trace
from stages.common import read_params
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

HOSTILE = '</script><script>window.pwned = 1</script><!-- <img src=x onerror="alert(1)">'
LONG = "word " * 2000


def question(ability: str, index: int = 0) -> Question:
    return Question(
        id=f"conv3:{ability}:{index}",
        conversation_id="3",
        ability=ability,  # type: ignore[arg-type]
        index=index,
        question=f"A question of {ability}?",
    )


QUESTIONS = [question("information_extraction"), question("event_ordering")]
RUBRICS = [
    Rubric(
        question_id=QUESTIONS[0].id,
        ability="information_extraction",
        rubric=["LLM response should state: 550 dollars", "LLM response should state: March"],
        source_chat_ids=[1],
    ),
    Rubric(
        question_id=QUESTIONS[1].id,
        ability="event_ordering",
        rubric=["moved in", "signed the lease"],
        source_chat_ids=[2, 3],
    ),
]
CHAT = ChatSlice(
    conversation_id="3",
    sessions=[
        Session(
            number=1,
            date="March-02-2024",
            date_iso="2024-03-02",
            messages=[
                ChatMessage(id=0, role="user", content="never quoted"),
                ChatMessage(id=1, role="user", content="My budget is 550 dollars. " + HOSTILE),
                ChatMessage(id=2, role="assistant", content=LONG),
                ChatMessage(id=3, role="user", content="I signed the lease."),
                ChatMessage(id=4, role="assistant", content=LONG),
            ],
        )
    ],
)


def trace(question_id: str, answer: str, reached: list[int]) -> Trace:
    records = [
        ToolCallRecord(
            name="search_memory",
            arguments={"query": "budget", "kind": "all"},
            raw_arguments='{"query": "budget"}',
            ids=["conv3:fact:1"],
            message_ids=reached,
            result='{"results": [' + json.dumps(HOSTILE) + "]}",
            turn=0,
        ),
        ToolCallRecord(
            name="no_such_tool",
            arguments=None,
            raw_arguments="{oops",
            ids=[],
            message_ids=[],
            result='{"error": "unknown tool"}',
            turn=1,
            error="unknown tool 'no_such_tool'",
            source="text",
        ),
    ]
    return Trace(
        question_id=question_id,
        answer=answer,
        tool_calls=records,
        turn_texts=["Let me look.", ""],
        reached_ids=["conv3:fact:1"],
        reached_message_ids=reached,
        steps=2,
        calls=3,
        prompt_tokens=300,
        completion_tokens=30,
        max_context_tokens=150,
        test_model=True,
    )


TRACES = [
    trace(QUESTIONS[0].id, "Your budget is 550 dollars. " + HOSTILE, [1, 4]),
    trace(QUESTIONS[1].id, "1. moved in\n2. bought a sofa", [2]),
]
JUDGEMENTS = [
    Judgement(
        question_id=QUESTIONS[0].id,
        ability="information_extraction",
        items=[
            ItemScore(
                rubric_item=RUBRICS[0].rubric[0],
                score=1.0,
                reason="names the amount",
                reply='{"score": 1, "reason": "names the amount"}',
            ),
            ItemScore(rubric_item=RUBRICS[0].rubric[1], score=0.0, error="the judge call failed"),
        ],
        score=0.5,
        score_excluding_known_bad=0.5,
        flags=["model_error"],
        calls=2,
    ),
    Judgement(
        question_id=QUESTIONS[1].id,
        ability="event_ordering",
        items=[
            ItemScore(rubric_item="moved in", score=1.0, reason="matched answer line 1"),
            ItemScore(rubric_item="signed the lease", score=0.0, reason="no answer line matched"),
        ],
        score=0.25,
        score_excluding_known_bad=0.25,
        event=EventAlignment(
            answer_lines=["moved in", "bought a sofa"],
            matches=[0, None],
            calls=3,
            failed_calls=0,
            precision=0.5,
            recall=0.5,
            f1=0.5,
            tau_b=None,
            tau_norm=0.5,
        ),
        flags=[],
        calls=3,
    ),
]
ROWS = [
    {
        "question_id": QUESTIONS[0].id,
        "ability": "information_extraction",
        "score": 0.5,
        "score_excluding_known_bad": 0.5,
        "flags": ["model_error"],
        "evidence_recall": 1.0,
        "judge_calls": 2,
        "score_beam_code": 0.5,
    },
    {
        "question_id": QUESTIONS[1].id,
        "ability": "event_ordering",
        "score": 0.25,
        "score_excluding_known_bad": 0.25,
        "flags": [],
        "evidence_recall": 0.5,
        "judge_calls": 3,
        "score_beam_code": 0.25,
    },
]


def report(failures: bool = True) -> dict[str, Any]:
    groups = ["information_extraction", "event_ordering", "overall"]
    keys = (*COST_KEYS, "total")
    out: dict[str, Any] = {
        "score": {"information_extraction": 0.5, "event_ordering": 0.25, "overall": 0.375},
        "score_ci_low": dict.fromkeys(groups, 0.25),
        "score_ci_high": dict.fromkeys(groups, 0.5),
        "score_excluding_known_bad": dict.fromkeys(groups, 0.375),
        "evidence_recall": dict.fromkeys(groups, 0.75),
        "questions": {"information_extraction": 1, "event_ordering": 1, "overall": 2},
        "cost_calls": dict.fromkeys(keys, 7),
        "cost_tokens": dict.fromkeys(keys, 1234),
        "score_beam_code": {"overall": 0.4125},
    }
    if failures:
        out["failures"] = {"judge_calls": 1, "tool_errors": 2}
    return out


KIND_CASES = {"stated": 2, "other_fact": 2, "altered": 2, "empty": 2, "buried": 2}
KIND_AGREEMENT = {"stated": 1.0, "other_fact": 0.5, "altered": 1.0, "empty": 0.5, "buried": 0.0}
CHECK_SUMMARY = {
    "cases": {"overall": 10, **KIND_CASES},
    "agreement": {"overall": 0.6, **KIND_AGREEMENT},
    "confusion": {
        "expected_1_given_1": 2,
        "expected_1_given_0_5": 0,
        "expected_1_given_0": 2,
        "expected_1_given_none": 0,
        "expected_0_given_1": 1,
        "expected_0_given_0_5": 0,
        "expected_0_given_0": 5,
        "expected_0_given_none": 0,
    },
    "parse_failure_rate": 0.0,
    "failed_calls": 0,
}


def run_record(headline: dict[str, Any]) -> RunRecord:
    """The report's record of the two-question run, with this headline."""
    rows = [JudgedQuestion.model_validate(r) for r in ROWS]
    judge = summarize(JUDGEMENTS, RUBRICS, rows)
    cost = {
        key: CostRow(calls=7, tokens=1234, estimate_calls=8, estimate_tokens=1500)
        for key in (*COST_KEYS, "total")
    }
    zero = Failures(
        extraction_calls=0, resolution_calls=0, questions_in_error=0, judge_calls=0, tool_errors=0
    )
    model = ModelUse(role="agent", model="scripted/rules", test_model=True)
    return RunRecord(
        run=RunSummary(
            mode="lite",
            system="graphrag",
            models=[model],
            test_model=True,
            small_models=[],
            judge_is_agent=False,
        ),
        headline=Headline.model_validate(headline),
        scores=score_table(rows, ReportParams(bootstrap_samples=200, seed=0, confidence=0.95)),
        # the events as a run with other alignments would have them
        judge=judge.model_copy(update={"events": EventScores(event_f1=0.5, event_tau_norm=0.5)}),
        cost=cost,
        failures=zero,
        flags=count_flags(rows),
        confidence=0.95,
        judge_check=JudgeCheckSummary.model_validate(CHECK_SUMMARY),
    )


def lay_out_run(root: Path, *, failures: bool = True) -> None:
    """A two-question run in `root`, as the pipeline's stages leave it."""
    chats = root / "data" / "slice" / "chats"
    chats.mkdir(parents=True)
    (chats / "conv3.json").write_text(CHAT.model_dump_json(), encoding="utf-8")
    write_jsonl(root / "data/slice/questions.jsonl", QUESTIONS)
    write_jsonl(root / "data/slice/rubrics.jsonl", RUBRICS)
    write_jsonl(root / "data/answer/traces.jsonl", TRACES)
    write_jsonl(root / "data/judge/judgements.jsonl", JUDGEMENTS)
    write_jsonl(root / "data/judge/questions.jsonl", ROWS)
    write_json(root / "metrics/run_record.json", run_record(report(failures)).model_dump())
    graph = {"chunks": 4, "entities": 11, "statements": 4, "relationships": 52}
    write_json(root / "data/ingest/graphs.json", {"total": graph, "conv3": graph})
    write_json(root / "data/judge_check/summary.json", CHECK_SUMMARY)
    for name in ("params.yaml", "settings.yaml", "pins.yaml"):
        (root / name).write_bytes((REPO_ROOT / name).read_bytes())
    for stage, role in (("ingest", "extraction"), ("answer", "agent"), ("judge", "judge")):
        model = {
            "role": role,
            "model": "scripted/rules",
            "api_base": None,
            "test_model": True,
            "judge_is_agent": role == "judge",
        }
        write_json(root / f"data/{stage}/run.json", {"mode": "lite", "models": [model]})


def write_viewer(out: Path = Path("reports/run.html")) -> Path:
    """What `python -m commands.viewer --out OUT` does in the working directory."""
    return viewer_command.write_page(read_params(), out)


def embedded(page: str) -> Any:
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


@pytest.fixture()
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lay_out_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_embedded_json_has_no_tag_and_round_trips() -> None:
    data = {"text": HOSTILE + " & \u2028 <!-- -->", "nested": [{"a": "</SCRIPT >"}]}
    text = embed_json(data)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == data


def test_the_page_is_self_contained_and_its_policy_allows_only_its_own_css_and_script(
    run_dir: Path,
) -> None:
    page = write_viewer().read_text(encoding="utf-8")
    # the hostile texts cannot close the data element: only the two script elements close
    assert page.count("</script>") == 2 and page.count("<script") == 2
    assert "window.pwned" not in page.split('id="run-data">')[0]
    # no URL to fetch anything from, and no way for data to become markup
    assert not re.search(r"\b(src|href)\s*=", page.replace(embed_json(embedded(page)), ""))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in SCRIPT
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    for inline in (CSS, SCRIPT):
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy.group(1)
    assert "default-src 'none'" in policy.group(1)


def test_the_page_data_holds_what_each_question_needs(run_dir: Path) -> None:
    data = embedded(write_viewer().read_text(encoding="utf-8"))
    assert data["mode"] == "lite" and data["test_model"] is True and data["judge_is_agent"]
    assert data["headline"]["events"] == {"event_f1": 0.5, "event_tau_norm": 0.5}
    first, events = data["questions"]
    assert first["answer"] == TRACES[0].answer  # the untrusted text, unchanged
    assert [i["item"] for i in first["items"]] == RUBRICS[0].rubric
    assert first["items"][0]["reply"] == '{"score": 1, "reason": "names the amount"}'
    assert first["items"][1]["error"] == "the judge call failed"
    assert first["flags"] == ["model_error"] and first["needed"] == [1]
    # the agent's steps: one entry per turn, with its text and calls (arguments as JSON text)
    assert [t["text"] for t in first["turns"]] == ["Let me look.", ""]
    search, unknown = (t["calls"][0] for t in first["turns"])
    assert json.loads(search["arguments"]) == {"kind": "all", "query": "budget"}
    assert search["result"] == TRACES[0].tool_calls[0].result
    assert unknown["arguments"] == "{oops" and unknown["error"].startswith("unknown tool")
    assert (search["source"], unknown["source"]) == ("native", "text")
    assert events["event"]["matches"] == [0, None] and events["event"]["tau_b"] is None
    # messages: each quoted once; whole where a question needed it, short where only reached
    messages = data["messages"]
    assert set(messages) == {"3:1", "3:2", "3:3", "3:4"}
    assert messages["3:1"]["text"] == CHAT.sessions[0].messages[1].content
    assert len(messages["3:2"]["text"]) == EVIDENCE_CHARS  # needed, cut at the evidence limit
    assert len(messages["3:4"]["text"]) == REACHED_CHARS  # only reached
    assert messages["3:3"] | {"text": ""} == {
        "role": "user",
        "session": 1,
        "date": "2024-03-02",
        "text": "",
    }
    # the headline: scores, cost (calls and tokens), failures, graph figures; no wall clock
    headline = data["headline"]
    assert headline["overall"]["score"] == 0.375 and headline["overall"]["n"] == 2
    assert [g["name"] for g in headline["abilities"]][:2] == [
        "abstention",
        "contradiction_resolution",
    ]
    assert len(headline["abilities"]) == 10 and headline["abilities"][0]["n"] == 0
    assert {c["phase"]: c["calls"] for c in headline["cost"]}["total"] == 7
    assert headline["failures"] == {"judge_calls": 1, "tool_errors": 2}
    assert data["graphs"][0]["conversation"] == "conv3" and data["graphs"][0]["chunks"] == 4
    assert "CC BY-SA 4.0" in data["licence"]
    assert "seconds" not in json.dumps(data)


def test_a_run_without_failures_has_none_and_the_same_files_give_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lay_out_run(tmp_path, failures=False)
    monkeypatch.chdir(tmp_path)
    out = write_viewer(Path("elsewhere/page.html"))
    first = out.read_bytes()
    assert embedded(first.decode())["headline"]["failures"] is None
    assert write_viewer(out).read_bytes() == first
    assert not list(out.parent.glob(".*.tmp"))  # written atomically, nothing left beside it


def test_graph_counts_come_from_the_ingest_stages_data_file(run_dir: Path) -> None:
    counts = {"chunks": 9, "entities": 8, "statements": 7, "relationships": 6}
    write_json(run_dir / "data/ingest/graphs.json", {"total": counts, "conv3": counts})
    [graph] = embedded(write_viewer().read_text(encoding="utf-8"))["graphs"]
    assert graph["chunks"] == 9 and graph["supersedes"] is None
    (run_dir / "data/ingest/graphs.json").unlink()
    with pytest.raises(DataError, match=r"no graph counts.*dvc repro ingest"):
        write_viewer()


def test_a_headline_without_a_group_shows_it_as_absent_and_the_cost_is_the_records(
    run_dir: Path,
) -> None:
    metrics = report()
    del metrics["cost_tokens"], metrics["evidence_recall"]
    write_json(run_dir / "metrics/run_record.json", run_record(metrics).model_dump())
    headline = embedded(write_viewer().read_text(encoding="utf-8"))["headline"]
    assert headline["overall"]["evidence_recall"] is None
    # calls, tokens and their estimate per phase come from the record's cost table
    assert {c["tokens"] for c in headline["cost"]} == {1234}
    assert headline["cost"][-1] == {
        "phase": "total",
        "calls": 7,
        "tokens": 1234,
        "estimate_calls": 8,
        "estimate_tokens": 1500,
    }


def test_a_missing_file_or_trace_is_a_data_error_that_names_it(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = run_dir / "metrics/run_record.json"
    record.write_text('{"headline": {}}', encoding="utf-8")  # a file of another version
    with pytest.raises(DataError, match=r"not a run record of this version.*dvc repro report"):
        write_viewer()
    record.unlink()
    with pytest.raises(DataError, match=r"no run record in metrics/run_record.json.*dvc repro"):
        write_viewer()
    lay_out_run(run_dir / "other")
    monkeypatch.chdir(run_dir / "other")
    traces = Path("data/answer/traces.jsonl")
    traces.write_text(traces.read_text().splitlines()[0] + "\n")
    with pytest.raises(DataError, match="conv3:event_ordering:0"):
        write_viewer()
    assert not Path("reports/run.html").exists()


def test_render_page_escapes_the_title() -> None:
    page = render_page({"mode": "<b>lite</b>"})
    assert "<title>BEAM memory benchmark: &lt;b&gt;lite&lt;/b&gt; run</title>" in page


def test_the_headline_has_the_benchmark_code_score_and_the_judge_check_with_its_warning(
    run_dir: Path,
) -> None:
    params = yaml.safe_load((run_dir / "params.yaml").read_text(encoding="utf-8"))
    params.setdefault("judge_check", {})["min_agreement"] = 0.8
    (run_dir / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    data = embedded(write_viewer().read_text(encoding="utf-8"))
    assert data["headline"]["beam_code"] == 0.4125
    check = data["judge_check"]
    assert (check["agreement"], check["cases"], check["min_agreement"]) == (0.6, 10, 0.8)
    assert {k["kind"]: (k["agreement"], k["cases"]) for k in check["kinds"]} == {
        k: (KIND_AGREEMENT[k], KIND_CASES[k]) for k in KIND_CASES
    }
    assert check["warning"].startswith("the judge gave the known score on 60% of 10")
    assert "buried 0%" in check["warning"]  # the weakest kind is named
    # at the threshold: no warning; a run without the check shows none
    params["judge_check"]["min_agreement"] = 0.6
    (run_dir / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    assert embedded(write_viewer().read_text(encoding="utf-8"))["judge_check"]["warning"] is None
    (run_dir / "data/judge_check/summary.json").unlink()
    assert embedded(write_viewer().read_text(encoding="utf-8"))["judge_check"] is None


def test_the_page_reads_no_params_or_files_itself() -> None:
    # The stage hands the page its records: bench.viewer reaches no door (params.yaml, files),
    # not even through the judge check's summary, and stays quick to import.
    code = (
        "import sys, bench.viewer.page; "
        "print(sorted(m for m in sys.modules if m.startswith(('clients', 'stages'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_a_run_that_reads_gold_says_so_with_its_leak_check(run_dir: Path) -> None:
    before = embedded(write_viewer().read_text(encoding="utf-8"))
    assert before["reads_gold"] is False and before["leak_check"].startswith("not run")
    answer = json.loads((run_dir / "data/answer/run.json").read_text())
    write_json(run_dir / "data/answer/run.json", answer | {"system": "oracle", "reads_gold": True})
    check = {"questions": 2, "prompts": 2, "gold_texts": 6, "findings": []}
    write_json(run_dir / "data/answer/leak_check.json", check)
    page = write_viewer().read_text(encoding="utf-8")
    data = embedded(page)
    assert data["reads_gold"] is True and data["system"] == "oracle"
    assert data["leak_check"].startswith("reads gold by design")
    assert "<title>BEAM memory benchmark: lite run (reads gold evidence: an upper bound)" in page
    assert "RUN.reads_gold" in page  # the script shows the warning from the data
