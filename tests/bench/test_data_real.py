"""The data stages on the real BEAM conversations (../shared/beam): the facts the issue lists.

The pipeline runs once per module: fetch for real from a loopback Hub serving the mirror (pins
overridden to the mirror's size and sha256), verify-hash, repair, and every mode's slices
(lite, full, all), checked against the repository's fixture.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.data_check import Finding
from bench.repair import load_table, marker, propose_repair, repair_table
from bench.slice import SliceFixture, from_ranges, normalize_ids
from clients.files import read_jsonl
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.params import Release
from schemas.records import ABILITIES, ChatSlice, Question, Rubric
from stages.common import read_params
from stages.fetch import fetch
from stages.repair import repair
from stages.slice import make_slices
from stages.verify_hash import verify
from tests.conftest import MIRROR_PARQUET, REPO_ROOT, SHARED_BEAM
from tests.support.e2e_repo import mirror_release
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.beam, pytest.mark.usefixtures("mirror_parquet")]

FULL_CONVERSATIONS = ["1", "4", "6", "13", "17"]
ALL_CONVERSATIONS = [str(c) for c in range(1, 21)]
KNOWN_BAD = {
    "conv17:temporal_reasoning:1",
    "conv1:temporal_reasoning:0",
    "conv6:event_ordering:0",
    "conv4:multi_session_reasoning:1",
}


def mirror_pins() -> Release:
    """The 100K release pins with the mirror's size and sha256 in place of the release's."""
    return Release.model_validate(mirror_release(real_release().model_dump(), "100K"))


def real_release() -> Release:
    return read_params(REPO_ROOT / "params.yaml").release["100K"]


@dataclass
class Run:
    root: Path
    fetched: Path
    receipt: Path
    repaired: Path
    repair_metrics: Path
    lite: Path
    full: Path
    all: Path

    def folder(self, mode: str) -> Path:
        return {"lite": self.lite, "full": self.full, "all": self.all}[mode]


@pytest.fixture(scope="module")
def run(shared_beam: Path, mirror_parquet: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("real")
    params_file = REPO_ROOT / "params.yaml"
    folder = root / "data" / "fetch" / "dataset"
    with HubMirror(MIRROR_ROOT) as mirror:
        cached = fetch(
            mirror_pins(),
            read_params(params_file).fetch,
            folder,
            endpoint=mirror.endpoint,
            cache_dir=root / "hf",
        )
        assert cached == [False] and [m for m, _ in mirror.requests] == ["HEAD", "GET"]
    fetched = folder / "100K-00000-of-00001.parquet"
    receipt = root / "data" / "verify_hash" / "receipt.json"
    verify(folder, "100K", mirror_pins(), receipt)
    repaired, repair_metrics = root / "data" / "repair" / "dataset.parquet", root / "repair.json"
    repair(receipt, "100K", read_params(params_file).repair, repaired, repair_metrics)
    slice_params = read_params(params_file).slice
    fixture = REPO_ROOT / slice_params.fixtures["100K"]
    outs = {}
    for mode in ("lite", "full", "all"):
        outs[mode] = root / mode
        make_slices(
            repaired, fixture, mode, slice_params.tokenizer, outs[mode], root / f"{mode}.json"
        )
    return Run(
        root, fetched, receipt, repaired, repair_metrics, outs["lite"], outs["full"], outs["all"]
    )


def slice_all(
    run: Run, tmp_path: Path, conversations: list[str] | None = None, **options: Any
) -> tuple[Path, Path]:
    """make_slices of mode all from the repaired data into `tmp_path` (the slice and metrics)."""
    slice_params = read_params(REPO_ROOT / "params.yaml").slice
    out, metrics = tmp_path / "slice", tmp_path / "slice.json"
    make_slices(
        run.repaired,
        REPO_ROOT / slice_params.fixtures["100K"],
        "all",
        slice_params.tokenizer,
        out,
        metrics,
        conversations or [],
        **options,
    )
    return out, metrics


def original_rows() -> dict[str, dict[str, Any]]:
    return {r["conversation_id"]: r for r in pq.read_table(MIRROR_PARQUET).to_pylist()}


def messages_of(row: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {m["id"]: m for session in row["chat"] for m in session}


def slices(folder: Path) -> dict[str, ChatSlice]:
    return {
        p.stem.removeprefix("conv"): ChatSlice.model_validate_json(p.read_text())
        for p in (folder / "chats").iterdir()
    }


# ---- fetch and verify-hash ------------------------------------------------------------------


def test_fetch_from_loopback_hub_gives_the_mirror_bytes(run: Run) -> None:
    assert run.fetched.read_bytes() == MIRROR_PARQUET.read_bytes()


def test_fetch_second_time_comes_from_the_cache(run: Run, hub_mirror: HubMirror) -> None:
    again = run.root / "again"
    params = read_params(REPO_ROOT / "params.yaml").fetch

    cached = fetch(
        mirror_pins(), params, again, endpoint=hub_mirror.endpoint, cache_dir=run.root / "hf"
    )

    assert cached == [True] and hub_mirror.requests == []


def test_the_real_pins_reject_the_mirror_with_expected_and_actual(run: Run) -> None:
    real = real_release()
    assert real.files[0].size_bytes == 5_429_768  # the defaults stay the real release's

    with pytest.raises(IntegrityError) as info:
        verify(run.fetched.parent, "100K", real, run.root / "rejected.json")

    text = str(info.value)
    assert real.files[0].sha256 in text and mirror_pins().files[0].sha256 in text
    assert f"expected 5,429,768 bytes, found {mirror_pins().files[0].size_bytes:,}" in text
    assert not (run.root / "rejected.json").exists()


# ---- repair ---------------------------------------------------------------------------------


def test_real_message_97_facts() -> None:
    content = messages_of(original_rows()["4"])[97]["content"]
    assert len(content) == 348_853
    assert content.count(" ") == 345_211
    assert hashlib.sha256(content.encode()).hexdigest() == (
        "f395a89214d8b2b6f226e6ae3f0e4f3727222d55223fef10ea76405af865ed73"
    )
    assert set(content[1_470:]) <= {" ", "|", "\\", "\n"}
    assert content[1_468] not in {" ", "|", "\\", "\n"}  # the sound text ends at 1,469


PINNED_REPAIRS = [("4", 97, 1_469, 348_853), ("5", 123, 2_108, 53_108), ("2", 169, 2_794, 18_385)]
"""The 100K messages pins.yaml repairs: conversation, message, sound characters, characters."""


def test_the_proposed_cuts_of_the_real_runaway_messages_are_the_pinned_ones(run: Run) -> None:
    """`python -m stages.repair --propose` with each pin's `rest` (and filler) finds the cut a
    person pinned, on the verified release."""
    table = load_table(run.fetched.read_bytes(), str(run.fetched))
    pinned = [r for r in read_params(REPO_ROOT / "params.yaml").repair.messages if r.tier == "100K"]
    assert [(p.conversation_id, p.message_id, p.sound_chars) for p in pinned] == [
        (c, m, sound) for c, m, sound, _ in PINNED_REPAIRS
    ]
    for pin in pinned:
        proposal = propose_repair(
            table, "100K", pin.conversation_id, pin.message_id, pin.rest, pin.filler or None, "r"
        )
        assert (proposal.sound_chars, proposal.original_sha256) == (
            pin.sound_chars,
            pin.original_sha256,
        )
    # message 97's tail alone is spaces, so the default filler would keep 348,469 characters:
    # a person looks and names the filler
    assert propose_repair(table, "100K", "4", 97, "filler", None, "r").sound_chars == 348_469


def test_repair_of_the_real_runaway_messages(run: Run) -> None:
    before, after = original_rows(), pq.read_table(run.repaired).to_pylist()
    pins = {
        (p.conversation_id, p.message_id): p
        for p in read_params().repair.messages
        if p.tier == "100K"
    }
    record = json.loads(run.repair_metrics.read_text())

    for (conv, message, sound, chars), done in zip(PINNED_REPAIRS, record["repairs"], strict=True):
        repaired = messages_of(next(r for r in after if r["conversation_id"] == conv))[message]
        original = messages_of(before[conv])[message]["content"]
        cut = original[sound:]
        assert repaired["content"] == original[:sound] + marker(len(cut), pins[conv, message], cut)
        assert done == {
            "conversation_id": conv,
            "message_id": message,
            "rest": pins[conv, message].rest,
            "why": pins[conv, message].why,
            "chars_before": chars,
            "chars_kept": sound,
            "chars_cut": chars - sound,
            "chars_after": len(repaired["content"]),
        }
    assert (record["tier"], record["messages_changed"]) == ("100K", 3)
    assert record["chars_cut"] == 347_384 + 51_000 + 15_591


def test_a_tampered_real_message_is_refused_and_nothing_is_cut(run: Run) -> None:
    rows = list(original_rows().values())
    message = messages_of(next(r for r in rows if r["conversation_id"] == "5"))[123]
    message["content"] = message["content"].replace("/", "|", 1)  # one character of the filler
    table = pa.Table.from_pylist(rows, schema=pq.read_schema(MIRROR_PARQUET))

    with pytest.raises(IntegrityError, match="conversation 5, message 123 is not the message"):
        repair_table(table, read_params().repair.messages, "100K", "tampered")


def test_every_other_real_message_passes_through_byte_for_byte(run: Run) -> None:
    before = original_rows()
    after = {r["conversation_id"]: r for r in pq.read_table(run.repaired).to_pylist()}
    assert before.keys() == after.keys()
    changed = []
    for conv, row in before.items():
        for key in row:
            if key != "chat":
                assert after[conv][key] == row[key], (conv, key)
        old, new = messages_of(row), messages_of(after[conv])
        assert old.keys() == new.keys()
        changed += [(conv, i) for i in old if old[i] != new[i]]
    assert sorted(changed) == sorted((conv, message) for conv, message, _, _ in PINNED_REPAIRS)


# ---- slices ---------------------------------------------------------------------------------


def test_lite_slice_is_the_three_answer_messages(run: Run) -> None:
    (only,) = slices(run.lite).values()
    assert only.conversation_id == "17"
    assert [(s.number, s.date, [m.id for m in s.messages]) for s in only.sessions] == [
        (1, "March-15-2024", [18]),
        (3, "July-10-2024", [156, 157]),
    ]
    questions = read_jsonl(run.lite / "questions.jsonl", Question)
    assert [q.id for q in questions] == [
        "conv17:information_extraction:0",
        "conv17:multi_session_reasoning:0",
    ]
    rubrics = read_jsonl(run.lite / "rubrics.jsonl", Rubric)
    assert [r.source_chat_ids for r in rubrics] == [[18], [156, 157]]
    assert not any(r.known_bad_rubric for r in rubrics)
    metrics = json.loads((run.root / "lite.json").read_text())
    assert 1_200 <= metrics["chat"]["tokens"] <= 1_350  # "about 1.28k"


@pytest.mark.parametrize(
    ("mode", "conversations", "messages", "sessions", "tokens"),
    [
        ("full", FULL_CONVERSATIONS, 1_254, 21, 569_000),  # "about 569k"
        ("all", ALL_CONVERSATIONS, 5_732, 90, 2_587_000),  # "about 2.59M"
    ],
)
def test_whole_conversation_slices_are_whole_sessions(
    run: Run, mode: str, conversations: list[str], messages: int, sessions: int, tokens: int
) -> None:
    folder = run.folder(mode)
    got = slices(folder)
    assert sorted(got, key=int) == conversations
    rows = original_rows()
    for conv, chat_slice in got.items():
        row = rows[conv]
        assert [s.number for s in chat_slice.sessions] == list(range(1, len(row["chat"]) + 1))
        assert [s.date for s in chat_slice.sessions] == [s[0]["time_anchor"] for s in row["chat"]]
        ids = [m.id for s in chat_slice.sessions for m in s.messages]
        assert ids == list(range(len(ids)))  # contiguous, file order
        for session in row["chat"]:  # only each session's first message has a time anchor
            assert session[0]["role"] == "user" and session[0]["time_anchor"]
            assert not any(m["time_anchor"] for m in session[1:])
        assert all(m.content for s in chat_slice.sessions for m in s.messages)
    metrics = json.loads((folder / "sizes.json").read_text())
    assert json.loads((run.root / f"{mode}.json").read_text())["chat"] == {
        "tokens": metrics["total"]["tokens"]
    }
    assert metrics["total"]["conversations"] == len(conversations)
    assert metrics["total"]["messages"] == messages
    assert metrics["total"]["sessions"] == sessions
    assert 0.97 * tokens <= metrics["total"]["tokens"] <= 1.03 * tokens
    assert metrics["total"]["questions"] == 20 * len(conversations)
    assert metrics["questions"] == {a: 2 * len(conversations) for a in ABILITIES}
    assert metrics["total"]["known_bad_rubric"] == 4


@pytest.mark.parametrize(
    ("mode", "conversations"), [("full", FULL_CONVERSATIONS), ("all", ALL_CONVERSATIONS)]
)
def test_questions_are_both_of_each_ability_of_each_conversation(
    run: Run, mode: str, conversations: list[str]
) -> None:
    folder = run.folder(mode)
    questions = read_jsonl(folder / "questions.jsonl", Question)
    assert [q.id for q in questions] == [
        f"conv{c}:{a}:{i}" for c in conversations for a in ABILITIES for i in (0, 1)
    ]
    assert Counter(q.ability for q in questions) == {a: 2 * len(conversations) for a in ABILITIES}
    rubrics = {r.question_id: r for r in read_jsonl(folder / "rubrics.jsonl", Rubric)}
    assert list(rubrics) == [q.id for q in questions]
    # the four documented ones (all in full's conversations); no other rubric has been checked
    assert {q for q, r in rubrics.items() if r.known_bad_rubric} == KNOWN_BAD
    assert all(rubrics[q].known_bad_reason for q in KNOWN_BAD)


def test_all_holds_every_conversation_and_question_of_the_split(run: Run) -> None:
    rows = original_rows()
    assert sorted(rows, key=int) == ALL_CONVERSATIONS
    asked = {
        f"conv{conv}:{ability}:{index}"
        for conv, row in rows.items()
        for ability, items in ast.literal_eval(row["probing_questions"]).items()
        for index in range(len(items))
    }
    questions = read_jsonl(run.all / "questions.jsonl", Question)
    assert len(asked) == 400 and {q.id for q in questions} == asked
    for conv, chat_slice in slices(run.all).items():
        ids = [m.id for s in chat_slice.sessions for m in s.messages]
        assert ids == sorted(messages_of(rows[conv]))
    for conv in FULL_CONVERSATIONS:  # the same whole conversations, byte for byte
        name = f"chats/conv{conv}.json"
        assert (run.all / name).read_bytes() == (run.full / name).read_bytes()


def test_every_real_source_id_shape_normalizes_to_existing_messages(run: Run) -> None:
    rows, shapes = original_rows(), set()
    rubrics = {r.question_id: r for r in read_jsonl(run.all / "rubrics.jsonl", Rubric)}
    for conv in ALL_CONVERSATIONS:
        present = set(messages_of(rows[conv]))
        for ability, items in ast.literal_eval(rows[conv]["probing_questions"]).items():
            for index, item in enumerate(items):
                raw = item.get("source_chat_ids")
                shapes.add(_shape(raw))
                ids = rubrics[f"conv{conv}:{ability}:{index}"].source_chat_ids
                assert ids == normalize_ids(raw, "q") and set(ids) <= present
    assert shapes == {"absent", "flat", "dict", "nested", "repeats"}


def test_no_plan_profile_narrative_or_answer_text_in_any_slice(run: Run) -> None:
    rows = original_rows()
    for folder in (run.lite, run.full, run.all):
        for conv, chat_slice in slices(folder).items():
            text = "\n".join(m.content for s in chat_slice.sessions for m in s.messages)
            row = rows[conv]
            probing = ast.literal_eval(row["probing_questions"])
            hidden = [
                row["conversation_plan"],
                row["narratives"],
                row["user_profile"]["user_info"],
                row["user_profile"]["user_relationships"],
                *(
                    str(q.get(k))
                    for items in probing.values()
                    for q in items
                    for k in ("answer", "ideal_answer", "ideal_response", "ideal_summary")
                    if q.get(k)
                ),
            ]
            lines = {ln.strip() for h in hidden for ln in h.splitlines() if len(ln.strip()) >= 40}
            assert len(lines) > 50
            leaked = [ln for ln in lines if ln in text]
            assert leaked == [], (conv, leaked[:3])
            raw = (folder / "chats" / f"conv{conv}.json").read_text()
            assert not {"plan", "profile", "narratives", "user_questions", "rubric"} & set(
                re.findall(r'"([a-z_]+)":', raw)
            )


def test_questions_the_agent_reads_hold_no_answer_rubric_plan_or_profile(run: Run) -> None:
    rows = original_rows()
    for folder in (run.lite, run.full, run.all):
        raw = (folder / "questions.jsonl").read_text()
        assert {k for line in raw.splitlines() for k in json.loads(line)} == {
            "id",
            "conversation_id",
            "ability",
            "index",
            "question",
        }
        for conv in {q.conversation_id for q in read_jsonl(folder / "questions.jsonl", Question)}:
            row = rows[conv]
            probing = ast.literal_eval(row["probing_questions"])
            hidden = [
                row["conversation_plan"],
                row["user_profile"]["user_info"],
                *(r for items in probing.values() for q in items for r in q.get("rubric", [])),
                *(
                    str(q.get(k))
                    for items in probing.values()
                    for q in items
                    for k in ("answer", "ideal_answer", "ideal_response", "ideal_summary")
                    if q.get(k)
                ),
            ]
            lines = {ln.strip() for h in hidden for ln in h.splitlines() if len(ln.strip()) >= 40}
            assert len(lines) > 20
            leaked = [ln for ln in lines if ln in raw]
            assert leaked == [], (folder.name, conv, leaked[:3])


def test_one_conversation_of_all_keeps_exactly_its_questions_and_messages(
    run: Run, tmp_path: Path
) -> None:
    # checks conversation 4's own pins, as the slice stage does
    out, metrics = slice_all(run, tmp_path, ["4"])

    assert [p.name for p in (out / "chats").iterdir()] == ["conv4.json"]
    assert (out / "chats" / "conv4.json").read_bytes() == (
        run.all / "chats" / "conv4.json"
    ).read_bytes()
    (chat,) = slices(out).values()
    assert [m.id for s in chat.sessions for m in s.messages] == sorted(
        messages_of(original_rows()["4"])
    )
    whole = read_jsonl(run.all / "questions.jsonl", Question)
    assert read_jsonl(out / "questions.jsonl", Question) == [
        q for q in whole if q.conversation_id == "4"
    ]
    rubrics = read_jsonl(out / "rubrics.jsonl", Rubric)
    assert [r.question_id for r in rubrics] == [q.id for q in whole if q.conversation_id == "4"]
    assert [r.question_id for r in rubrics if r.known_bad_rubric] == [
        "conv4:multi_session_reasoning:1"
    ]
    sizes = json.loads((out / "sizes.json").read_text())
    assert sizes["conv4"] == json.loads((run.all / "sizes.json").read_text())["conv4"]
    assert (sizes["total"]["conversations"], sizes["total"]["messages"]) == (1, 212)
    assert sizes["total"]["sessions"] == 3
    assert json.loads(metrics.read_text())["chat"] == {"tokens": sizes["conv4"]["tokens"]}


def test_a_conversation_all_does_not_have_is_refused_naming_its_twenty(
    run: Run, tmp_path: Path
) -> None:
    with pytest.raises(ParamsError) as info:
        slice_all(run, tmp_path, ["4", "21"])
    assert (
        f"conversation id(s) ['21'] that mode all does not have; its conversations are "
        f"{ALL_CONVERSATIONS}" in str(info.value)
    )
    assert not (tmp_path / "slice").exists()


def truncated_chats() -> dict[str, list[dict[str, Any]]]:
    """The benchmark's `chat_trunecated.json` per 100K conversation that has one, as messages."""
    found = {}
    for folder in (SHARED_BEAM / "100K").iterdir():
        path = folder / "chat_trunecated.json"
        if path.is_file():
            sessions = json.loads(path.read_text(encoding="utf-8"))
            found[folder.name] = [m for s in sessions for turn in s["turns"] for m in turn]
    return found


def test_the_official_cut_is_what_the_benchmarks_truncated_chats_hold(
    run: Run, tmp_path: Path
) -> None:
    truncated = truncated_chats()
    fixture = SliceFixture.model_validate_json(
        (REPO_ROOT / "fixtures" / "slices.json").read_bytes()
    )
    assert fixture.official_cut.last_message_ids == {c: m[-1]["id"] for c, m in truncated.items()}
    assert sorted(truncated, key=int) == ["5", "7", "10", "11", "12", "16", "17", "18", "19", "20"]

    out, _ = slice_all(run, tmp_path, cut="official")

    repaired = {(r.conversation_id, r.message_id) for r in read_params().repair.messages}
    for conv, cut in truncated.items():
        chat = ChatSlice.model_validate_json((out / "chats" / f"conv{conv}.json").read_text())
        held = [m for s in chat.sessions for m in s.messages]
        assert [m.id for m in held] == [m["id"] for m in cut], conv
        assert [m.content for m in held if (conv, m.id) not in repaired] == [
            m["content"] for m in cut if (conv, m["id"]) not in repaired
        ], conv
    source = json.loads((out / "source.json").read_text())
    assert sum(source["left_out"].values()) == 638  # of mode all's 5,732 messages
    assert source["cut"] == "official" and len(source["left_out"]) == 10
    untouched = set(ALL_CONVERSATIONS) - set(truncated)
    for conv in untouched:  # conversations without a truncated chat are read whole
        assert (out / "chats" / f"conv{conv}.json").read_bytes() == (
            run.all / "chats" / f"conv{conv}.json"
        ).read_bytes()


FINDINGS_100K_ALL = [
    ("no_source_ids", "9", "conv9:preference_following:1"),
    ("no_source_ids", "18", "conv18:summarization:0"),
    ("no_source_ids", "18", "conv18:summarization:1"),
    ("no_source_ids", "20", "conv20:summarization:0"),
    ("no_source_ids", "20", "conv20:summarization:1"),
]
"""The data check on mode all after the pinned repairs (no message runs away); every turn has its
reply and every session is in date order."""


def test_the_data_check_reports_the_known_defects_of_each_mode_and_fixes_none(run: Run) -> None:
    def found(mode: str) -> list[tuple[str, str, int | str | None]]:
        rows = read_jsonl(run.folder(mode) / "findings.jsonl", Finding)
        return [(f.kind, f.conversation_id, f.question_id or f.message_id) for f in rows]

    assert found("all") == FINDINGS_100K_ALL
    assert found("full") == [] and found("lite") == []
    # the repaired messages reach the slice as the repair left them
    chat = ChatSlice.model_validate_json((run.all / "chats" / "conv5.json").read_text())
    (message,) = [m for s in chat.sessions for m in s.messages if m.id == 123]
    assert (
        len(message.content)
        == json.loads(run.repair_metrics.read_text())["repairs"][1]["chars_after"]
    )


def test_a_finding_stops_the_slice_when_settings_say_so_and_nothing_is_written(
    run: Run, tmp_path: Path
) -> None:
    with pytest.raises(DataError) as info:
        slice_all(run, tmp_path, stop_on_findings=True)
    message = str(info.value)
    assert "found 5 defect(s) in mode all" in message
    assert "no_source_ids question conv9:preference_following:1" in message
    assert "slice.stop_on_findings: false" in message and "pins.yaml `repair`" in message
    assert not (tmp_path / "slice").exists() and not (tmp_path / "slice.json").exists()


def test_fixture_lists_the_slices_it_pins(run: Run) -> None:
    fixture = SliceFixture.model_validate_json(
        (REPO_ROOT / "fixtures" / "slices.json").read_bytes()
    )
    for mode in ("lite", "full", "all"):
        folder = run.folder(mode)
        assert sorted(fixture.modes[mode].slices) == sorted(slices(folder))  # type: ignore[index]
        for conv, pin in fixture.modes[mode].slices.items():  # type: ignore[index]
            chat = folder / "chats" / f"conv{conv}.json"
            assert hashlib.sha256(chat.read_bytes()).hexdigest() == pin.sha256
            got = [
                m.id
                for s in ChatSlice.model_validate_json(chat.read_text()).sessions
                for m in s.messages
            ]
            assert got == from_ranges(pin.message_ids)


# ---- the known-bad rubrics, checked against the chat ----------------------------------------


def _probing(conv: str) -> dict[str, list[dict[str, Any]]]:
    return ast.literal_eval(original_rows()[conv]["probing_questions"])


def test_conv17_temporal_1_rubric_says_46_days_the_chat_gives_76() -> None:
    chat = messages_of(original_rows()["17"])
    start = re.search(r"\bApril (\d+)", chat[108]["content"])
    end = re.search(r"\bJuly (\d+)", chat[156]["content"])
    assert start and end
    days = (date(2024, 7, int(end[1])) - date(2024, 4, int(start[1]))).days
    assert days == 76
    assert any("46 days" in r for r in _probing("17")["temporal_reasoning"][1]["rubric"])


def test_conv1_temporal_0_rubric_says_8_weeks_its_answer_says_4() -> None:
    item = _probing("1")["temporal_reasoning"][0]
    assert any("8 weeks" in r for r in item["rubric"])
    assert "4 weeks" in item["answer"]


def test_conv6_event_ordering_0_sixth_event_was_raised_second() -> None:
    ids = _probing("6")["event_ordering"][0]["source_chat_ids"]
    assert len(ids) == 6 and ids[5] == 6
    assert sorted(ids).index(6) == 1


def test_conv4_multi_session_1_rubric_says_20_points_message_110_gives_10() -> None:
    chat = messages_of(original_rows()["4"])
    first, second = (
        [int(x) for x in re.findall(r"(\d+)%", chat[i]["content"])[:2]] for i in (82, 110)
    )
    assert first[1] - first[0] == 20 and second[1] - second[0] == 10
    assert any(
        "20 percentage points" in r for r in _probing("4")["multi_session_reasoning"][1]["rubric"]
    )


def _shape(raw: object) -> str:
    if raw is None:
        return "absent"
    if isinstance(raw, dict):
        return "dict"
    assert isinstance(raw, list)
    if any(isinstance(x, list) for x in raw):
        return "nested"
    return "repeats" if len(set(raw)) < len(raw) else "flat"
