"""No default answer path carries gold: every prompt the answer model received, read back from the
scripted test model's request log (BEAM_SCRIPTED_RECORD, not from the systems' own files), is
scanned for each question's gold-only texts (bench/leak_check.py `gold_texts`, its
normalisation: rubric items, ability labels, question ids, the judge-side annotations), in a
full-mode run (100 questions, every ability) of no_memory, full_context, rag and graphrag (the
peers mem0 and graphiti are not run here: their builds take too long for this test). The same
scan flags a run with params `answer.protocol: exabase` (the stand-in of ExaBase's
answer_prompt, tests/support/protocol_standin.py, quotes the annotations as the real one does),
and that run's records say the answerer saw judge-side annotations.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.leak_check import GoldText, LeakWatch, normalize
from clients.files import read_chats, read_jsonl, read_records
from schemas.layout import LAYOUT
from schemas.records import Question, Rubric
from tests.support.e2e_repo import RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]

DEFAULT_SYSTEMS = ("no_memory", "full_context", "rag", "graphrag")
GUIDED = {
    "abstention",
    "event_ordering",
    "knowledge_update",
    "instruction_following",
    "preference_following",
    "summarization",
    "temporal_reasoning",
}
"""The abilities the stand-in's answer_prompt gives guidance (as ExaBase's, fewer of them)."""


def call_text(call: dict[str, Any]) -> str:
    """Every text of a recorded request, normalized, as one string: its messages' texts and tool
    calls (the log names the tools; their descriptions are the system's fixed prompts)."""
    parts = [str(m.get("content") or "") for m in call["messages"]]
    parts += [str(m.get("tool_calls") or "") for m in call["messages"]]
    parts += [str(t) for t in call.get("tools") or []]
    return normalize("\n".join(parts))


def gold_found(
    calls: Sequence[dict[str, Any]], questions: Sequence[Question], repo: RepoCopy
) -> tuple[set[str], list[tuple[str, GoldText]]]:
    """The questions whose text some call holds, and each (question, gold text) found in a call
    of that question."""
    rubrics = read_records(repo.path / LAYOUT.slice.rubrics, Rubric)
    chats = read_chats(repo.path / LAYOUT.slice.chats)
    gold = LeakWatch.of(questions, rubrics, chats).gold
    asked = {q.id: normalize(q.question) for q in questions}
    seen: set[str] = set()
    found: list[tuple[str, GoldText]] = []
    for call in calls:
        text = call_text(call)
        for qid, question in asked.items():
            if question not in text:
                continue
            seen.add(qid)
            found += [(qid, g) for g in gold[qid] if g.text in text]
    return seen, found


def answer_calls(repo: RepoCopy) -> tuple[list[dict[str, Any]], list[Question]]:
    """`dvc repro answer` for the copy's params: the answer stage's recorded calls (those after
    the ingest's) and the questions."""
    repo.dvc("repro", "ingest")
    before = len(repo.model_calls())
    repo.dvc("repro", "answer")
    questions = read_jsonl(repo.path / LAYOUT.slice.questions, Question)
    return repo.model_calls()[before:], questions


def test_default_answer_paths_carry_no_gold_and_exabase_is_flagged(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror, mode="full") as repo:
        # the scripted model has no known window: the whole chat (a 100K conversation) fits
        repo.update_params({"full_context": {"context_tokens": 128000}})
        for system in DEFAULT_SYSTEMS:
            repo.update_params({"system": system})
            calls, questions = answer_calls(repo)
            seen, found = gold_found(calls, questions, repo)
            assert len(questions) == 100 and calls, system
            assert seen == {q.id for q in questions}, (system, len(seen))  # every one scanned
            assert found == [], (system, found[:5])
            assert repo.read_json("data/answer/leak_check.json")["findings"] == [], system
            assert repo.read_json("data/answer/run.json")["answer_protocol"] == "beam"

        repo.update_params({"system": "no_memory", "answer": {"protocol": "exabase"}})
        calls, questions = answer_calls(repo)
        seen, found = gold_found(calls, questions, repo)
        # only the questions the stand-in guides change their prompt; the others' prompts are
        # no_memory's above, served from the call cache (no call, nothing recorded)
        assert {q.ability for q in questions if q.id in seen} == GUIDED
        kinds = {g.kind for _, g in found}
        assert "annotation" in kinds, kinds  # the same check flags the leaky protocol
        flagged = {q for q, _ in found}
        abilities = {q.split(":")[1] for q in flagged}
        assert {"event_ordering", "temporal_reasoning", "instruction_following"} <= abilities
        assert repo.read_json("data/answer/run.json")["answer_protocol"] == "exabase"
        assert repo.read_json("data/answer/leak_check.json")["findings"]

        repo.dvc("repro")
        assert repo.read_json("metrics/report.json")["gold"] == {"annotations": 1}
        record = (repo.path / "reports" / "memory.md").read_text()
        assert "The answerer saw judge-side annotations" in record
        assert "Leak check: annotations given by design" in record
        page = (repo.path / "reports" / "run.html").read_text()
        assert '"annotated": true' in page or '"annotated":true' in page
