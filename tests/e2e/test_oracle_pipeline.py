"""The oracle (systems/oracle.py) through the whole pipeline, lite and then full, in a temporary
copy of the repo with the scripted test model: its build makes no model call, each answer prompt
holds exactly the question's cited messages (read back from the test model's request log, not
from the oracle's own files), an abstention question gets an empty `<chat>` block, and every
record says the run reads gold evidence: the answer stage's run.json, the record's title and
warning, the leak check's line (`reads gold by design`), the headline's `gold.reads` and the
run's page. The oracle needs no Neo4j and its build no model: both modes take about 25 s here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from schemas.records import ABILITIES
from systems.prompts import ORACLE
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]

MESSAGE_HEADER = re.compile(r"^\[message (\d+) · ", re.MULTILINE)
CHAT_BLOCK = re.compile(r"<chat>\n(.*)\n</chat>\n\nQuestion: (.*)", re.DOTALL)


def answer_prompts(calls: list[dict]) -> dict[str, str]:
    """The oracle's answer prompts in the test model's request log: question text -> chat."""
    prompts = {}
    for call in calls:
        if call["prompt_version"] != ORACLE.version:
            continue
        found = CHAT_BLOCK.fullmatch(call["messages"][-1]["content"])
        assert found is not None, call["messages"][-1]["content"][:200]
        prompts[found.group(2)] = found.group(1)
    return prompts


def assert_reads_gold_everywhere(repo: RepoCopy, questions: int) -> None:
    run = repo.read_json("data/answer/run.json")
    assert run["system"] == "oracle" and run["reads_gold"] is True
    assert "reads_gold" not in repo.read_json("data/ingest/run.json")
    check = repo.read_json("data/answer/leak_check.json")
    assert check["findings"] == [] and check["questions"] == questions
    assert check["prompts"] == questions  # one call per question
    record = (repo.path / "reports" / "memory.md").read_text()
    first = record.splitlines()[0]
    assert first.startswith("# BEAM memory benchmark: oracle (reads gold evidence: an upper bound)")
    assert "**This run reads gold evidence: `oracle`" in record.split("## Pins")[0]
    assert "Leak check: reads gold by design" in record.split("## Pins")[0]
    report = repo.read_json("metrics/report.json")
    assert report["gold"] == {"reads": 1}
    assert report["questions"]["overall"] == questions
    page = (repo.path / "reports" / "run.html").read_text()
    assert '"reads_gold":true' in page and "reads gold by design" in page


def assert_prompts_hold_the_cited_messages(repo: RepoCopy, calls: list[dict]) -> int:
    """Each question's prompt (in `calls`, the test model's log: a prompt served from the call
    cache is not in it) shows exactly its rubric's cited messages, in chat order; returns how
    many cited nothing (their chat block is empty)."""
    questions = _jsonl(repo.path / "data/slice/questions.jsonl")
    rubrics = {r["question_id"]: r for r in _jsonl(repo.path / "data/slice/rubrics.jsonl")}
    traces = {t["question_id"]: t for t in _jsonl(repo.path / "data/answer/traces.jsonl")}
    prompts = answer_prompts(calls)
    assert len(prompts) == len({q["question"] for q in questions})
    empty = 0
    for question in questions:
        chat = prompts[question["question"]]
        shown = [int(m) for m in MESSAGE_HEADER.findall(chat)]
        cited = rubrics[question["id"]]["source_chat_ids"]
        assert shown == sorted(set(cited)), question["id"]  # all cited in the slice, chat order
        assert traces[question["id"]]["reached_message_ids"] == shown
        if not cited:
            assert chat == "", question["id"]
            empty += 1
    return empty


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_the_oracle_runs_lite_and_full_and_every_record_says_it_reads_gold(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.update_params({"system": "oracle"})
        repo.dvc("repro")
        calls = repo.model_calls()
        tasks = Counter(c["task"] for c in calls if c["prompt_version"].startswith("oracle"))
        assert tasks == {"answer": 2}  # lite: two questions, no build call
        assert assert_prompts_hold_the_cited_messages(repo, calls) == 0
        assert_reads_gold_everywhere(repo, questions=2)
        assert repo.read_json("metrics/report.json")["evidence_recall"] == {"overall": 1.0}

        repo.update_params({"mode": "full"})
        repo.dvc("repro")
        calls = repo.model_calls()  # lite's two prompts are full's too, served from the cache
        ingest = repo.read_json("data/ingest/graphs.json")["total"]
        assert ingest["questions"] == 100 and ingest["cited_absent"] == 0
        abstentions = assert_prompts_hold_the_cited_messages(repo, calls)
        assert abstentions >= 10  # every abstention question cites nothing: an empty block
        assert_reads_gold_everywhere(repo, questions=100)
        report = repo.read_json("metrics/report.json")
        assert all(report["questions"][a] == 10 for a in ABILITIES)
