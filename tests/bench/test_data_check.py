"""The slice's data check (bench/data_check.py): made-up chats for each kind of finding, then the
real 500K chats of ../shared/beam (the 100K modes are checked through the slice stage in
tests/bench/test_data_real.py)."""

from __future__ import annotations

import json

import pytest

from bench.data_check import Finding, check_chat, check_mode, check_rubrics, runaway_detail
from bench.slice import build_slice
from schemas.records import ChatMessage, ChatSlice, Rubric, Session
from tests.conftest import SHARED_BEAM, skip_or_fail

PROSE = (
    "We moved the release to Friday because the migration needs a second review, and the "
    "staging database still has the old schema. "
)


def _chat(*sessions: tuple[str, list[tuple[str, str]]]) -> ChatSlice:
    """Sessions of (date, [(role, text)]), message ids in order."""
    out, next_id = [], 0
    for number, (day, messages) in enumerate(sessions, start=1):
        rows = []
        for role, text in messages:
            rows.append(ChatMessage(id=next_id, role=role, content=text))  # type: ignore[arg-type]
            next_id += 1
        out.append(Session(number=number, date=day, date_iso=day, messages=rows))
    return ChatSlice(conversation_id="7", sessions=out)


def test_filler_characters_and_a_looping_line_are_runaway_prose_and_short_text_are_not() -> None:
    slashes = "Here is the fix.\n" + "/\n" * 3_000
    assert runaway_detail(slashes) == "6,017 characters, 100% of them '\\n', '/', 'e'"
    loop = "The total is:\n" + "\\[ T_n = 2n + 1 \\quad \\text{for every } n \\ge 0 \\]\n" * 120
    detail = runaway_detail(loop)
    assert detail is not None and "repeated 120 times" in detail
    assert runaway_detail(PROSE * 60) is None  # long, but no filler
    assert runaway_detail("/" * 3_999) is None  # too short to waste more than one chunk
    table = "| a | b |\n" * 40 + PROSE * 40  # a repeated row, a small share of the message
    assert runaway_detail(table) is None


def test_each_kind_is_reported_with_its_ids() -> None:
    chat = _chat(
        ("2024-03-15", [("user", "hi"), ("assistant", "/" * 5_000), ("user", "again?")]),
        ("2024-03-10", [("user", "earlier date"), ("assistant", "ok")]),
        (
            "2024-03-20",
            [
                ("user", "the dosage, as discussed in Bullet Point 25, and bullet point #3"),
                ("assistant", "As in bullet point 25, here is the plan."),  # echoes: no finding
                ("user", "a bullet point list of three items, please"),  # not a plan citation
                ("assistant", "ok"),
            ],
        ),
    )
    found = check_chat(chat, whole=True)
    assert [(f.kind, f.message_id) for f in found] == [
        ("runaway_message", 1),
        ("plan_text", 5),
        ("turn_without_reply", 2),
        ("session_date_out_of_order", 3),
    ]
    assert found[1].detail == "the user cites the conversation plan's items 2 time(s)"
    assert "session 2 (2024-03-10) follows session 1 (2024-03-15)" in found[3].detail
    assert found[0].where == "conversation 7 message 1"
    # a slice that keeps only some messages (lite) has gaps between turns by design
    assert [f.kind for f in check_chat(chat, whole=False)] == [
        "runaway_message",
        "plan_text",
        "session_date_out_of_order",
    ]


def test_a_question_that_cites_nothing_is_reported_unless_it_tests_abstention() -> None:
    def rubric(question_id: str, ability: str, ids: list[int]) -> Rubric:
        return Rubric(question_id=question_id, ability=ability, rubric=["x"], source_chat_ids=ids)  # type: ignore[arg-type]

    rubrics = [
        rubric("conv9:preference_following:1", "preference_following", []),
        rubric("conv9:abstention:0", "abstention", []),
        rubric("conv9:summarization:0", "summarization", [3, 4]),
    ]
    assert check_rubrics(rubrics) == [
        Finding(
            kind="no_source_ids",
            conversation_id="9",
            question_id="conv9:preference_following:1",
            detail="a preference_following question without source_chat_ids",
        )
    ]
    assert check_rubrics(rubrics)[0].where == "question conv9:preference_following:1"
    clean = _chat(("2024-03-15", [("user", PROSE), ("assistant", PROSE)]))
    assert check_mode([clean], rubrics[1:], whole=True) == []


RUNAWAY_500K = {
    "4": [573],
    "7": [725, 727, 777, 783, 787, 867],
    "9": [461, 707, 753, 755, 757],
    "28": [305, 519, 841],
}
"""Found on the real 500K chats: those the tier issue names (9: 461; 28: 305, 519, 841) and, as
loops of one equation repeated 60 to 787 times or a trail of ` *`, 4: 573, 7 and 9's others."""
PLAN_TEXT_500K = [("9", m) for m in (564, 566, 568, 570, 852, 854, 858)]
"""The 500K user messages that cite the generator's plan (`as mentioned in bullet point 25`)."""


@pytest.mark.beam
def test_the_real_500k_chats_have_exactly_the_known_runaway_messages() -> None:
    tier = SHARED_BEAM / "500K"
    if not tier.is_dir():
        skip_or_fail(f"the 500K chats are not in {tier}")
    runaway: dict[str, list[int]] = {}
    plan_text: list[tuple[str, int | None]] = []
    other: list[Finding] = []
    for folder in sorted(tier.iterdir(), key=lambda p: int(p.name)):
        sessions = json.loads((folder / "chat.json").read_text(encoding="utf-8"))
        rows = [[m for turn in s["turns"] for m in turn] for s in sessions]
        for finding in check_chat(build_slice(folder.name, rows, None), whole=True):
            if finding.kind == "runaway_message":
                runaway.setdefault(folder.name, []).append(finding.message_id or 0)
            elif finding.kind == "plan_text":
                plan_text.append((folder.name, finding.message_id))
            else:
                other.append(finding)
    assert runaway == RUNAWAY_500K
    assert plan_text == PLAN_TEXT_500K
    assert other == []  # every turn answered, every session in date order
