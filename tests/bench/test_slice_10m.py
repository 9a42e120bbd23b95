"""The 10M layout on a small synthetic file: `chat` is a struct of ten plans (`plan-1` ...
`plan-10`), each a list of dated sessions whose message ids restart at 0; a `plans` column repeats
every sub-chat with its plan (never read). The slice joins the plans in order (plan-10 after
plan-9), makes the ids global as the questions cite them, and the data check reports the defects
the tier issue names: a session dated before the one it follows (conversation 5, plan 1, its
second batch) and two turns without a reply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.data_check import Finding
from bench.repair import repair_table
from bench.slice import plan_sessions
from clients.files import read_jsonl, write_json
from schemas.errors import DataError
from schemas.params import Repair
from schemas.records import ChatSlice, Rubric
from stages.slice import make_slices, repin

PLANS = 10
SESSIONS_PER_PLAN = 2
MESSAGES_PER_SESSION = 4
"""Each session's messages, but for the two of NO_REPLY (one more)."""
PLAN_SECRET = "SECRET 10M PLAN: the sub-chat's plan and profile, never a memory's input."
MESSAGE = pa.struct(
    [
        ("content", pa.string()),
        ("id", pa.int64()),
        ("role", pa.string()),
        ("time_anchor", pa.string()),
    ]
)
SESSIONS = pa.list_(pa.list_(MESSAGE))
SCHEMA = pa.schema(
    [
        ("conversation_id", pa.string()),
        ("chat", pa.struct([(f"plan-{k}", SESSIONS) for k in range(1, PLANS + 1)])),
        ("plans", pa.list_(pa.struct([("plan", pa.string()), ("chat", SESSIONS)]))),
        ("probing_questions", pa.string()),
    ]
)
NO_REPLY = {(3, 0), (7, 1)}
"""(plan, session) whose third message, a user's, gets no reply: another user message follows."""


def date(plan: int, session: int) -> str:
    if (plan, session) == (1, 1):
        return "January-02-2024"  # before plan 1's first session: out of order
    return f"{['March', 'April', 'May', 'June', 'July'][session % 5]}-{plan:02d}-{2023 + plan}"


def roles(plan: int, session: int) -> list[str]:
    if (plan, session) in NO_REPLY:
        return ["user", "assistant", "user", "user", "assistant"]
    return ["user", "assistant"] * (MESSAGES_PER_SESSION // 2)


def plan_chat(plan: int) -> list[list[dict[str, Any]]]:
    sessions, local = [], 0
    for session in range(SESSIONS_PER_PLAN):
        messages = []
        for position, role in enumerate(roles(plan, session)):
            messages.append(
                {
                    "content": f"plan {plan} local message {local}",
                    "id": local,
                    "role": role,
                    "time_anchor": date(plan, session) if position == 0 else None,
                }
            )
            local += 1
        sessions.append(messages)
    return sessions


def global_id(plan: int, local: int) -> int:
    return sum(len(m) for k in range(1, plan) for m in plan_chat(k)) + local


TOTAL = global_id(PLANS + 1, 0)


def questions() -> str:
    cited = {
        "information_extraction": [[global_id(4, 2)], [global_id(10, 7)]],
        "multi_session_reasoning": [[global_id(1, 0), global_id(9, 5)], [global_id(2, 3)]],
    }
    probing = {
        ability: [
            {
                "question": f"Synthetic {ability} question {i}?",
                "rubric": [f"LLM response should state: fact {i}"],
                "source_chat_ids": ids,
            }
            for i, ids in enumerate(pairs)
        ]
        for ability, pairs in cited.items()
    }
    return repr(probing)


def rows() -> list[dict[str, Any]]:
    chat = {f"plan-{k}": plan_chat(k) for k in range(1, PLANS + 1)}
    plans = [{"plan": PLAN_SECRET, "chat": plan_chat(k)} for k in range(1, PLANS + 1)]
    return [
        {"conversation_id": "5", "chat": chat, "plans": plans, "probing_questions": questions()}
    ]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "repair" / "dataset.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows(), schema=SCHEMA), path)
    return path


@pytest.fixture
def fixture(tmp_path: Path, data: Path) -> Path:
    path = tmp_path / "fixtures" / "slices-10M.json"
    question_ids = [
        f"conv5:{a}:{i}"
        for a in ("information_extraction", "multi_session_reasoning")
        for i in (0, 1)
    ]
    zero = {"message_ids": [[0, 0]], "sha256": "0" * 64}
    write_json(
        path,
        {
            "about": "synthetic 10M",
            "known_bad_rubric": {},
            "official_cut": {"source": "synthetic", "last_message_ids": {}},
            "modes": {
                "all": {
                    "selection": "whole_conversations",
                    "conversations": ["5"],
                    "question_ids": question_ids,
                    "slices": {"5": zero},
                }
            },
        },
    )
    repin(data, path, "cl100k_base")
    return path


def test_the_plans_are_joined_in_order_with_global_ids_the_questions_cite(
    tmp_path: Path, data: Path, fixture: Path
) -> None:
    out = tmp_path / "slice"
    built, findings = make_slices(data, fixture, "all", "cl100k_base", out, tmp_path / "m.json")

    chat = ChatSlice.model_validate_json((out / "chats" / "conv5.json").read_text())
    held = [m for s in chat.sessions for m in s.messages]
    assert [m.id for m in held] == list(range(TOTAL))
    assert len(chat.sessions) == PLANS * SESSIONS_PER_PLAN
    # plan-10 comes after plan-9, not after plan-1 (as text sorts)
    assert held[-1].content == f"plan 10 local message {TOTAL - global_id(10, 0) - 1}"
    by_id = {m.id: m.content for m in held}
    rubrics = {r.question_id: r for r in read_jsonl(out / "rubrics.jsonl", Rubric)}
    cited = rubrics["conv5:information_extraction:0"].source_chat_ids
    assert [by_id[i] for i in cited] == ["plan 4 local message 2"]
    cited = rubrics["conv5:multi_session_reasoning:0"].source_chat_ids
    assert [by_id[i] for i in cited] == ["plan 1 local message 0", "plan 9 local message 5"]
    for path in out.rglob("*"):
        if path.is_file():
            assert PLAN_SECRET not in path.read_text(), path  # the plans column is never read
    assert built.slices[0].message_ids == list(range(TOTAL))
    assert findings == read_jsonl(out / "findings.jsonl", Finding)


def test_the_data_check_reports_the_date_out_of_order_and_the_turns_without_reply(
    tmp_path: Path, data: Path, fixture: Path
) -> None:
    _, findings = make_slices(data, fixture, "all", "cl100k_base", tmp_path / "s", tmp_path / "m")

    found = {(f.kind, f.message_id) for f in findings}
    out_of_order = ("session_date_out_of_order", global_id(1, MESSAGES_PER_SESSION))
    no_reply = {
        ("turn_without_reply", global_id(p, sum(len(m) for m in plan_chat(p)[:s]) + 2))
        for p, s in NO_REPLY
    }
    assert found == {out_of_order, *no_reply}
    detail = next(f.detail for f in findings if f.kind == "session_date_out_of_order")
    assert "session 2 (January-02-2024) follows session 1" in detail


def test_plan_ids_already_global_are_kept_and_others_are_refused() -> None:
    chat = {f"plan-{k}": plan_chat(k) for k in (1, 2)}
    shifted = plan_sessions(chat, "c")
    as_global = {
        "plan-1": chat["plan-1"],
        "plan-2": [[{**m, "id": m["id"] + 8} for m in s] for s in chat["plan-2"]],
    }
    assert plan_sessions(as_global, "c") == shifted
    broken = {**chat, "plan-2": [[{**m, "id": m["id"] + 3} for m in s] for s in chat["plan-2"]]}
    with pytest.raises(
        DataError, match=r"plan-2: message ids are neither 0\.\.7 nor global from 8"
    ):
        plan_sessions(broken, "c")
    with pytest.raises(DataError, match="field 'extra' is no plan"):
        plan_sessions({**chat, "extra": []}, "c")
    plain = [[{"id": 0}]]
    assert plan_sessions(plain, "c") == plain  # 100K to 1M: sessions as stored


def test_the_synthetic_file_has_the_10m_layout() -> None:
    table = pa.Table.from_pylist(rows(), schema=SCHEMA)
    assert table.schema.field("chat").type.num_fields == 10
    assert json.dumps(table.column("plans").to_pylist()).count(PLAN_SECRET) == PLANS


def test_the_repair_passes_the_plans_through_and_refuses_a_cut_inside_one() -> None:
    table = pa.Table.from_pylist(rows(), schema=SCHEMA)
    kept, record = repair_table(table, [], "10M", "synthetic")
    assert kept.equals(table) and record.messages_changed == 0
    pin = Repair(
        tier="10M",
        conversation_id="5",
        message_id=3,
        original_sha256="0" * 64,
        sound_chars=1,
        rest="repeated_lines",
        why="a cut a person chose",
    )
    with pytest.raises(DataError, match=r"10M layout.*not supported yet"):
        repair_table(table, [pin], "10M", "synthetic")
