"""A tiny synthetic dataset in the BEAM release's parquet layout, written for the tests.

No BEAM text: every message, plan and question here is made up. Conversation "4" holds a
message 97 whose tail is runaway filler (like the real one), so the repair stage can run on it;
conversation "17" has three sessions and probing questions whose `source_chat_ids` come in
every shape the real data uses (flat list, dict of lists, nested lists, repeats, absent).
"""

from __future__ import annotations

import copy
import hashlib
import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from schemas.records import ABILITIES

SOUND = "Here is the diagram you asked for:\n\n   A\n  / \\\n B---C\n    F"
FILLER = "\n   |\\\n   | \\\n" + " " * 500 + "|\n" * 40 + "\\" * 3 + " " * 200
BROKEN = SOUND + FILLER
PLAN_TEXT = "SECRET PLAN: batch one introduces the synthetic user's garden project in detail."
PROFILE_TEXT = "SECRET PROFILE: the synthetic user is a retired lighthouse keeper from nowhere."
NARRATIVE_TEXT = "SECRET NARRATIVE: the synthetic user later moves the garden to the roof."
ANSWER_TEXT = "SECRET ANSWER: Tuesdays and Thursdays, as said in session one."

_MESSAGE = pa.struct(
    [
        ("content", pa.string()),
        ("id", pa.int64()),
        ("index", pa.string()),
        ("question_type", pa.string()),
        ("role", pa.string()),
        ("time_anchor", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("conversation_id", pa.string()),
        (
            "conversation_seed",
            pa.struct([("category", pa.string()), ("id", pa.int64()), ("title", pa.string())]),
        ),
        ("narratives", pa.string()),
        (
            "user_profile",
            pa.struct([("user_info", pa.string()), ("user_relationships", pa.string())]),
        ),
        ("conversation_plan", pa.string()),
        (
            "user_questions",
            pa.list_(
                pa.struct(
                    [
                        ("messages", pa.list_(pa.list_(pa.string()))),
                        ("time_anchor", pa.string()),
                    ]
                )
            ),
        ),
        ("chat", pa.list_(pa.list_(_MESSAGE))),
        ("probing_questions", pa.string()),
    ]
)


def _session(first_id: int, count: int, anchor: str, texts: dict[int, str]) -> list[dict[str, Any]]:
    messages = []
    for offset in range(count):
        mid = first_id + offset
        role = "user" if offset % 2 == 0 else "assistant"
        messages.append(
            {
                "content": texts.get(mid, f"synthetic {role} message number {mid}"),
                "id": mid,
                "index": f"1,{offset}" if role == "user" else None,
                "question_type": "main_question" if role == "user" else None,
                "role": role,
                "time_anchor": anchor if offset == 0 else None,
            }
        )
    return messages


def _questions(conv: str, source_ids: dict[str, list[object]]) -> str:
    probing: dict[str, list[dict[str, object]]] = {}
    for ability in ABILITIES:
        items = []
        for index in (0, 1):
            item: dict[str, object] = {
                "question": f"Synthetic {ability} question {index} about conversation {conv}?",
                "answer": ANSWER_TEXT,
                "rubric": [f"LLM response should state: synthetic fact {index}"],
            }
            shapes = source_ids.get(ability)
            if shapes is not None:
                item["source_chat_ids"] = shapes[index]
            items.append(item)
        probing[ability] = items
    return repr(probing)  # the release stores a Python literal, not JSON


def rows() -> list[dict[str, Any]]:
    """Two conversations: "4" (message 97 broken) and "17" (three sessions, every id shape)."""
    conv4_chat = [
        _session(0, 60, "March-03-2024", {}),
        _session(60, 50, "April-15-2024", {97: BROKEN}),
    ]
    conv17_chat = [
        _session(0, 20, "March-15-2024", {}),
        _session(20, 10, "May-02-2024", {}),
        _session(30, 10, "July-10-2024", {}),
    ]
    shapes17: dict[str, list[object]] = {
        "information_extraction": [[18], [2, 3]],
        "multi_session_reasoning": [[34, 35], [1, [21, 33], 35]],
        "temporal_reasoning": [{"first_event": [4], "second_event": [36]}, {"a": [6], "b": [6]}],
        "event_ordering": [[2, 22, 22, [32, 34]], [38, 8]],
        "summarization": [[0, 1], [20, 21]],
        "contradiction_resolution": [{"first_statement": [10], "second_statement": [30]}, [12]],
        "knowledge_update": [{"original_info": [14], "updated_info": [24]}, [16]],
        "instruction_following": [[2], [4]],
        "preference_following": [[6], [8]],
    }
    shapes4: dict[str, list[object]] = {a: [[0], [60]] for a in ABILITIES if a != "abstention"}
    out = []
    for conv, chat, shapes in (("4", conv4_chat, shapes4), ("17", conv17_chat, shapes17)):
        out.append(
            {
                "conversation_id": conv,
                "conversation_seed": {"category": "synthetic", "id": int(conv), "title": "t"},
                "narratives": NARRATIVE_TEXT,
                "user_profile": {"user_info": PROFILE_TEXT, "user_relationships": PROFILE_TEXT},
                "conversation_plan": PLAN_TEXT,
                "user_questions": [
                    {"messages": [["synthetic scripted question"]], "time_anchor": "x"}
                ],
                "chat": chat,
                "probing_questions": _questions(conv, shapes),
            }
        )
    return out


def table(data: list[dict[str, Any]] | None = None) -> pa.Table:
    return pa.Table.from_pylist(copy.deepcopy(data if data is not None else rows()), schema=SCHEMA)


def parquet_bytes(data: list[dict[str, Any]] | pa.Table | None = None) -> bytes:
    tbl = data if isinstance(data, pa.Table) else table(data)
    sink = io.BytesIO()
    pq.write_table(tbl, sink, compression="zstd")
    return sink.getvalue()


def write_parquet(path: Path, data: list[dict[str, Any]] | pa.Table | None = None) -> str:
    """Write the dataset to `path`; returns its sha256."""
    payload = parquet_bytes(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return hashlib.sha256(payload).hexdigest()


BROKEN_SHA256 = hashlib.sha256(BROKEN.encode("utf-8")).hexdigest()
