"""slice on the synthetic dataset: selection, sessions and dates, id shapes, pins, outputs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.slice import (
    REPIN_COMMAND,
    SliceFixture,
    build_mode,
    cut_chat,
    from_ranges,
    normalize_ids,
    parse_date,
    parse_probing,
    render_session,
    sizes,
    summarize,
    to_ranges,
)
from clients.files import read_jsonl, write_json
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.params import Repair, SliceParams
from schemas.records import ABILITIES, ChatSlice, Question, Rubric
from stages.common import parse_params, read_params
from stages.common import read_repaired_rows as read_rows
from stages.slice import main, make_slices, repin
from tests.conftest import REPO_ROOT
from tests.support import synthetic_beam as beam
from tests.support.params import repo_params, write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

LITE_QUESTIONS = ["conv17:information_extraction:0", "conv17:multi_session_reasoning:0"]
FULL_QUESTIONS = [f"conv{c}:{a}:{i}" for c in ("4", "17") for a in ABILITIES for i in (0, 1)]
ZERO = "0" * 64


def fixture_dict() -> dict[str, object]:
    return {
        "about": "synthetic",
        "known_bad_rubric": {"conv17:temporal_reasoning:1": "both events are the same message"},
        # conversation 17's questions cite up to message 38: the cut leaves out 39 only
        "official_cut": {"source": "synthetic", "last_message_ids": {"17": 38}},
        "modes": {
            "lite": {
                "selection": "answer_messages",
                "conversations": ["17"],
                "question_ids": LITE_QUESTIONS,
                "slices": {"17": {"message_ids": [[0, 0]], "sha256": ZERO}},
            },
            "full": {
                "selection": "whole_conversations",
                "conversations": ["4", "17"],
                "question_ids": FULL_QUESTIONS,
                "slices": {c: {"message_ids": [[0, 0]], "sha256": ZERO} for c in ("4", "17")},
            },
        },
    }


@pytest.fixture
def data(tmp_path: Path) -> Path:
    source = tmp_path / "repair" / "dataset.parquet"
    beam.write_parquet(source)
    return source


@pytest.fixture
def pinned(tmp_path: Path, data: Path) -> Path:
    """A fixture file re-pinned on the synthetic data (as `--repin` does)."""
    path = tmp_path / "fixtures" / "slices.json"
    write_json(path, fixture_dict())
    repin(data, path, "cl100k_base")
    return path


def run(data: Path, fixture: Path, mode: str, tmp_path: Path) -> tuple[Path, Path]:
    out, metrics = tmp_path / "slice", tmp_path / "metrics" / "slice.json"
    make_slices(data, fixture, mode, "cl100k_base", out, metrics)
    return out, metrics


# ---- pure helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([18], [18]),
        ({"first_event": [108], "second_event": [56]}, [56, 108]),
        ([4, [136, 138], 2], [2, 4, 136, 138]),
        ([6, 62, 118, 118, 120], [6, 62, 118, 120]),
        ({"a": [66], "b": [66]}, [66]),
        (None, []),
        (["7", 3], [3, 7]),
    ],
)
def test_normalize_ids_handles_every_shape(raw: object, expected: list[int]) -> None:
    assert normalize_ids(raw, "q") == expected


@pytest.mark.parametrize("raw", [[1.5], [True], {"a": "text"}])
def test_normalize_ids_rejects_non_ids(raw: object) -> None:
    with pytest.raises(DataError, match="source_chat_ids"):
        normalize_ids(raw, "q")


def test_ranges_round_trip() -> None:
    ids = [0, 1, 2, 18, 156, 157, 300]
    assert to_ranges(ids) == [(0, 2), (18, 18), (156, 157), (300, 300)]
    assert from_ranges(to_ranges(ids)) == ids


def test_probing_questions_are_parsed_as_a_literal_never_evaluated(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    with pytest.raises(DataError, match="not a Python literal"):
        parse_probing(f"__import__('pathlib').Path({str(canary)!r}).touch()", "conv")
    assert not canary.exists()
    with pytest.raises(DataError, match="unknown ability"):
        parse_probing("{'telepathy': []}", "conv")
    assert parse_probing("{'abstention': [{'question': 'q'}]}", "c") == {
        "abstention": [{"question": "q"}]
    }


def test_dates() -> None:
    assert parse_date("March-15-2024", "s") == ("March-15-2024", "2024-03-15")
    with pytest.raises(DataError, match="no time_anchor"):
        parse_date(None, "s")
    with pytest.raises(DataError, match="not like March-15-2024"):
        parse_date("15/03/2024", "s")


# ---- building slices ------------------------------------------------------------------------


def test_lite_keeps_only_answer_messages_with_their_sessions_and_dates(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    out, metrics = run(data, pinned, "lite", tmp_path)

    chat = ChatSlice.model_validate_json((out / "chats" / "conv17.json").read_text())
    assert [(s.number, s.date, s.date_iso) for s in chat.sessions] == [
        (1, "March-15-2024", "2024-03-15"),
        (3, "July-10-2024", "2024-07-10"),  # the date of session 3's first message (id 30)
    ]
    assert [[m.id for m in s.messages] for s in chat.sessions] == [[18], [34, 35]]
    assert sorted(p.name for p in (out / "chats").iterdir()) == ["conv17.json"]
    questions = read_jsonl(out / "questions.jsonl", Question)
    assert [q.id for q in questions] == LITE_QUESTIONS
    rubrics = read_jsonl(out / "rubrics.jsonl", Rubric)
    assert [r.source_chat_ids for r in rubrics] == [[18], [34, 35]]
    assert not any(r.known_bad_rubric for r in rubrics)
    summary = json.loads((out / "sizes.json").read_text())
    assert summary["total"]["messages"] == 3 and summary["total"]["sessions"] == 2
    assert summary["conv17"]["tokens"] > 0
    # the metrics keep the chat's tokens only, the same key in every mode
    assert json.loads(metrics.read_text()) == {"chat": {"tokens": summary["total"]["tokens"]}}


def test_full_keeps_whole_conversations(tmp_path: Path, data: Path, pinned: Path) -> None:
    out, metrics = run(data, pinned, "full", tmp_path)

    for conv, sessions, count in (("4", 2, 110), ("17", 3, 40)):
        chat = ChatSlice.model_validate_json((out / "chats" / f"conv{conv}.json").read_text())
        ids = [m.id for s in chat.sessions for m in s.messages]
        assert len(chat.sessions) == sessions and ids == list(range(count))
    summary = json.loads((out / "sizes.json").read_text())
    assert set(json.loads(metrics.read_text())["chat"]) == {"tokens"}
    assert summary["total"]["questions"] == 40
    assert summary["questions"] == {a: 4 for a in ABILITIES}
    assert summary["total"]["known_bad_rubric"] == 1
    rubrics = {r.question_id: r for r in read_jsonl(out / "rubrics.jsonl", Rubric)}
    bad = rubrics["conv17:temporal_reasoning:1"]
    assert bad.known_bad_rubric and bad.known_bad_reason == "both events are the same message"
    assert rubrics["conv17:abstention:0"].source_chat_ids == []  # absent in the data
    assert rubrics["conv17:multi_session_reasoning:1"].source_chat_ids == [1, 21, 33, 35]


def test_the_official_cut_ends_each_chat_where_the_fixture_says_and_is_pinned_apart(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    fixture = SliceFixture.model_validate_json(pinned.read_bytes())
    assert set(fixture.modes["full"].official_slices) == {"17"}  # conversation 4 is not cut
    assert fixture.modes["lite"].official_slices == {}  # its answer messages are before the cut
    out, metrics = tmp_path / "slice", tmp_path / "slice.json"

    make_slices(data, pinned, "full", "cl100k_base", out, metrics, cut="official")

    chat = ChatSlice.model_validate_json((out / "chats" / "conv17.json").read_text())
    assert [m.id for s in chat.sessions for m in s.messages] == list(range(39))
    assert json.loads((out / "source.json").read_text()) == {
        "cut": "official",
        "left_out": {"conv17": 1},
        "repaired": [],
    }
    full = tmp_path / "full"
    make_slices(data, pinned, "full", "cl100k_base", full, tmp_path / "f.json")
    assert json.loads((full / "source.json").read_text())["left_out"] == {}
    assert (full / "chats" / "conv4.json").read_bytes() == (
        out / "chats" / "conv4.json"
    ).read_bytes()


def test_cut_chat_keeps_the_messages_up_to_the_point_and_drops_emptied_sessions() -> None:
    chat = [[{"id": 0}, {"id": 1}], [{"id": 2}, {"id": 3}], [{"id": 4}]]
    assert cut_chat(chat, 2) == [[{"id": 0}, {"id": 1}], [{"id": 2}]]
    assert cut_chat(chat, 9) == chat


def test_a_cut_before_a_cited_message_is_a_data_error_naming_the_cut(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    text = json.loads(pinned.read_text())
    text["official_cut"]["last_message_ids"] = {"17": 30}
    write_json(pinned, text)

    with pytest.raises(DataError, match=r"past the official cut of conversation 17 \(its last"):
        make_slices(
            data, pinned, "full", "cl100k_base", tmp_path / "s", tmp_path / "m.json", cut="official"
        )
    assert not (tmp_path / "s").exists()


def test_an_official_slice_that_differs_from_its_pin_stops_the_stage(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    text = json.loads(pinned.read_text())
    text["modes"]["full"]["official_slices"]["17"]["sha256"] = ZERO
    write_json(pinned, text)
    make_slices(
        data, pinned, "full", "cl100k_base", tmp_path / "a", tmp_path / "a.json"
    )  # full: fine

    with pytest.raises(IntegrityError, match=f"conv17: slice sha256 expected {ZERO}"):
        make_slices(
            data, pinned, "full", "cl100k_base", tmp_path / "s", tmp_path / "m.json", cut="official"
        )


def test_the_source_names_the_pinned_repairs_of_messages_the_slices_hold(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    repairs = [
        Repair(
            tier="100K",
            conversation_id=c,
            message_id=m,
            original_sha256=ZERO,
            sound_chars=1,
            rest="repeated_lines",
            why=f"why {c}:{m}",
        )
        for c, m in (("4", 97), ("99", 1), ("17", 5))
    ]
    out = tmp_path / "slice"

    make_slices(data, pinned, "lite", "cl100k_base", out, tmp_path / "m.json", repairs=repairs)
    assert json.loads((out / "source.json").read_text())["repaired"] == []  # lite: conv17 18, 156..
    make_slices(data, pinned, "full", "cl100k_base", out, tmp_path / "m.json", repairs=repairs)
    assert json.loads((out / "source.json").read_text())["repaired"] == [
        {"conversation_id": "4", "message_id": 97, "why": "why 4:97"},
        {"conversation_id": "17", "message_id": 5, "why": "why 17:5"},
    ]


def test_repaired_message_text_reaches_the_slice_unchanged(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    out, _ = run(data, pinned, "full", tmp_path)
    chat = ChatSlice.model_validate_json((out / "chats" / "conv4.json").read_text())
    contents = {m.id: m.content for s in chat.sessions for m in s.messages}
    assert contents[97] == beam.BROKEN  # the synthetic data here was not repaired


def test_slices_hold_chat_messages_only(tmp_path: Path, data: Path, pinned: Path) -> None:
    out, _ = run(data, pinned, "full", tmp_path)

    for path in (out / "chats").iterdir():
        text = path.read_text()
        for secret in (beam.PLAN_TEXT, beam.PROFILE_TEXT, beam.NARRATIVE_TEXT, beam.ANSWER_TEXT):
            assert secret not in text
        assert "SECRET" not in text
        keys: set[str] = set()
        _collect_keys(json.loads(text), keys)
        allowed = {"conversation_id", "sessions", "number", "date", "date_iso", "messages"}
        assert keys == allowed | {"id", "role", "content"}
    for name in ("questions.jsonl",):
        assert "SECRET" not in (out / name).read_text()
        assert "rubric" not in (out / name).read_text()


def test_outputs_are_byte_identical_across_runs(tmp_path: Path, data: Path, pinned: Path) -> None:
    first, _ = run(data, pinned, "full", tmp_path / "a")
    second, _ = run(data, pinned, "full", tmp_path / "b")
    for path in sorted(first.rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (second / path.relative_to(first)).read_bytes()


def test_render_session_is_one_document_per_session(data: Path, pinned: Path) -> None:
    fixture = SliceFixture.model_validate_json(pinned.read_bytes())
    built = build_mode(read_rows(data), fixture.modes["lite"], {}, "cl100k_base")
    session = built.slices[0].chat.sessions[1]
    assert render_session(session).startswith("Session 3 (July-10-2024)\n[34] user: ")
    assert sizes(built)["conv17"]["sessions"] == 2
    assert summarize(built)["chat"]["tokens"] == sizes(built)["total"]["tokens"] > 0


# ---- failures -------------------------------------------------------------------------------


def test_fixture_that_no_longer_matches_fails_and_leaves_nothing(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    out, metrics = run(data, pinned, "lite", tmp_path)  # a good earlier run
    raw = json.loads(pinned.read_text())
    raw["modes"]["lite"]["slices"]["17"]["sha256"] = "f" * 64
    raw["modes"]["lite"]["slices"]["17"]["message_ids"] = [[18, 19], [34, 35]]
    write_json(pinned, raw)

    with pytest.raises(IntegrityError) as info:
        run(data, pinned, "lite", tmp_path)

    text = str(info.value)
    assert "slice sha256 expected " + "f" * 64 in text
    assert "missing [19]" in text
    assert "public repository's copy" in text and "release file differs" in text
    assert REPIN_COMMAND in text
    assert not out.exists() and not metrics.exists()


def test_repin_makes_a_changed_release_pass_again(tmp_path: Path, pinned: Path) -> None:
    changed = beam.rows()
    changed[1]["chat"][0][18]["content"] = "a release with other words"
    source = tmp_path / "release.parquet"
    beam.write_parquet(source, changed)
    with pytest.raises(IntegrityError):
        run(source, pinned, "lite", tmp_path)

    repin(source, pinned, "cl100k_base")

    run(source, pinned, "lite", tmp_path)
    after = json.loads(pinned.read_text())
    assert after["modes"]["lite"]["question_ids"] == LITE_QUESTIONS  # choices stay
    assert after["known_bad_rubric"] == fixture_dict()["known_bad_rubric"]


def test_a_set_pinned_before_its_chats_runs_once_a_person_has_repinned_it(
    tmp_path: Path, data: Path
) -> None:
    """As 1M and 10M are pinned (scripts/pin_tier_questions.py): question ids, no slice, no
    official cut."""
    raw = fixture_dict()
    raw["official_cut"] = {"source": "not readable here", "last_message_ids": None}
    for pin in raw["modes"].values():  # type: ignore[attr-defined]
        pin["slices"] = {}
    path = tmp_path / "fixtures" / "slices.json"
    write_json(path, raw)
    with pytest.raises(IntegrityError, match="the lite slices are not pinned yet"):
        run(data, path, "lite", tmp_path)

    repin(data, path, "cl100k_base")

    run(data, path, "lite", tmp_path)
    after = json.loads(path.read_text())
    assert after["modes"]["full"]["slices"] and after["modes"]["full"]["official_slices"] == {}
    with pytest.raises(ParamsError, match="official cut is not pinned yet: not readable here"):
        make_slices(
            data, path, "lite", "cl100k_base", tmp_path / "o", tmp_path / "o.json", cut="official"
        )


def test_fixture_naming_a_missing_conversation_blames_the_fixture(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    raw = json.loads(pinned.read_text())
    raw["modes"]["lite"]["conversations"] = ["17", "99"]
    write_json(pinned, raw)
    for action in (
        lambda: run(data, pinned, "lite", tmp_path),
        lambda: repin(data, pinned, "cl100k_base"),
    ):
        with pytest.raises(ParamsError) as info:
            action()
        text = str(info.value)
        assert f"slice fixture {pinned}, mode lite: conversation id(s) ['99']" in text
        assert "has conversations ['17', '4']" in text
        assert "The fixture is wrong, not the release file" in text
        assert "release file differs" not in text
    assert not (tmp_path / "slice").exists()
    assert json.loads(pinned.read_text()) == raw  # repin refused and changed nothing


def test_data_without_a_fixture_conversation_blames_the_fixture(
    tmp_path: Path, pinned: Path
) -> None:
    source = tmp_path / "d.parquet"
    beam.write_parquet(source, [r for r in beam.rows() if r["conversation_id"] != "17"])
    with pytest.raises(ParamsError, match=r"conversation id\(s\) \['17'\]"):
        run(source, pinned, "lite", tmp_path)
    assert not (tmp_path / "slice").exists()


def test_fixture_naming_a_missing_message_blames_the_fixture(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    raw = json.loads(pinned.read_text())
    raw["modes"]["lite"]["slices"]["17"]["message_ids"] = [[18, 18], [34, 35], [40, 41]]
    write_json(pinned, raw)
    with pytest.raises(ParamsError) as info:
        run(data, pinned, "lite", tmp_path)
    text = str(info.value)
    assert f"slice fixture {pinned}, mode lite: modes.lite.slices['17'].message_ids" in text
    assert "message id(s) [40, 41] that conversation 17 does not have" in text
    assert "its 40 messages have ids 0-39" in text
    assert "The fixture is wrong, not the release file" in text
    assert "only if the release itself changed (a new pin in pins.yaml `release`)" in text
    assert f"re-pin with `{REPIN_COMMAND}`" in text
    assert not (tmp_path / "slice").exists()

    repin(data, pinned, "cl100k_base")  # message ids are what --repin rewrites
    run(data, pinned, "lite", tmp_path)


def test_missing_column(tmp_path: Path, pinned: Path) -> None:
    source = tmp_path / "d.parquet"
    beam.write_parquet(source, beam.table().drop_columns(["probing_questions"]))
    with pytest.raises(DataError, match="probing_questions"):
        run(source, pinned, "lite", tmp_path)


def test_missing_question(tmp_path: Path, data: Path, pinned: Path) -> None:
    raw = json.loads(pinned.read_text())
    raw["modes"]["lite"]["question_ids"] = ["conv17:information_extraction:5"]
    write_json(pinned, raw)
    with pytest.raises(IntegrityError, match="does not exist"):
        run(data, pinned, "lite", tmp_path)


def test_source_id_that_is_not_in_the_chat(tmp_path: Path, pinned: Path) -> None:
    changed = beam.rows()
    changed[1]["probing_questions"] = changed[1]["probing_questions"].replace("[18]", "[999]")
    source = tmp_path / "d.parquet"
    beam.write_parquet(source, changed)
    with pytest.raises(DataError, match=r"\[999\] are not messages of the chat"):
        run(source, pinned, "lite", tmp_path)


def test_invalid_fixture_and_unknown_mode(tmp_path: Path, data: Path, pinned: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"about": "x"}')
    with pytest.raises(ParamsError, match="slice fixture"):
        run(data, bad, "lite", tmp_path)
    raw = json.loads(pinned.read_text())
    del raw["modes"]["full"]
    write_json(pinned, raw)
    with pytest.raises(ParamsError, match="no mode 'full'"):
        run(data, pinned, "full", tmp_path)


def test_stage_process_exits_2_when_the_fixture_does_not_match(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    work = tmp_path / "work"
    (work / "data" / "repair").mkdir(parents=True)
    shutil.copy(data, work / "data" / "repair" / "dataset.parquet")
    raw = json.loads(pinned.read_text())
    raw["modes"]["lite"]["slices"]["17"]["sha256"] = "e" * 64
    write_json(work / "fixtures" / "slices.json", raw)
    write_params(work, mode="lite", slice={"fixtures": {"100K": "fixtures/slices.json"}})

    done = subprocess.run(
        [sys.executable, "-m", "stages.slice"],
        cwd=work,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert "do not match the fixture" in done.stderr and "--repin" in done.stderr
    assert not (work / "data" / "slice").exists()
    assert not (work / "metrics" / "slice.json").exists()


# ---- restricting a mode to chosen conversations (params slice.conversations) ---------------


def test_restriction_keeps_one_conversation_with_its_questions_and_checks_its_pins(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    raw = json.loads(pinned.read_text())
    raw["modes"]["full"]["slices"]["17"]["sha256"] = "f" * 64  # a conversation that is not kept
    write_json(pinned, raw)
    out, metrics = tmp_path / "slice", tmp_path / "slice.json"

    built, _ = make_slices(data, pinned, "full", "cl100k_base", out, metrics, ["4"])

    assert sorted(p.name for p in (out / "chats").iterdir()) == ["conv4.json"]
    chat = (out / "chats" / "conv4.json").read_bytes()
    assert hashlib.sha256(chat).hexdigest() == raw["modes"]["full"]["slices"]["4"]["sha256"]
    assert built.slices[0].message_ids == list(range(110))
    conv4 = [q for q in FULL_QUESTIONS if q.startswith("conv4:")]
    assert [q.id for q in read_jsonl(out / "questions.jsonl", Question)] == conv4
    assert [r.question_id for r in read_jsonl(out / "rubrics.jsonl", Rubric)] == conv4
    summary = json.loads((out / "sizes.json").read_text())
    assert set(summary) == {"conv4", "total", "questions"}
    assert summary["total"]["questions"] == 20 and summary["total"]["known_bad_rubric"] == 0
    assert summary["questions"] == {a: 2 for a in ABILITIES}
    assert summary["total"]["conversations"] == 1 and summary["total"]["messages"] == 110
    assert json.loads(metrics.read_text())["chat"]["tokens"] == summary["total"]["tokens"]

    raw["modes"]["full"]["slices"]["4"]["sha256"] = "e" * 64  # the kept one's pin still holds
    write_json(pinned, raw)
    with pytest.raises(IntegrityError) as info:
        make_slices(data, pinned, "full", "cl100k_base", out, metrics, ["4"])
    assert "conv4: slice sha256 expected " + "e" * 64 in str(info.value)
    assert "conv17" not in str(info.value)
    assert not out.exists() and not metrics.exists()


def test_restriction_to_every_conversation_is_the_whole_mode(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    whole, _ = run(data, pinned, "full", tmp_path / "a")
    out = tmp_path / "b" / "slice"
    make_slices(data, pinned, "full", "cl100k_base", out, tmp_path / "b.json", ["17", "4", "4"])
    for path in sorted(whole.rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (out / path.relative_to(whole)).read_bytes()


def test_restriction_to_a_conversation_the_mode_lacks_names_the_ones_it_has(
    tmp_path: Path, data: Path, pinned: Path
) -> None:
    out, metrics = tmp_path / "slice", tmp_path / "slice.json"
    for mode, ids, unknown, available in (
        ("full", ["4", "5"], "['5']", "['4', '17']"),
        ("lite", ["4"], "['4']", "['17']"),  # in the data, but not in the mode
    ):
        with pytest.raises(ParamsError) as info:
            make_slices(data, pinned, mode, "cl100k_base", out, metrics, ids)
        text = str(info.value)
        assert f"slice.conversations names conversation id(s) {unknown}" in text
        assert f"mode {mode} does not have; its conversations are {available}" in text
        assert not out.exists() and not metrics.exists()


def test_conversations_param_takes_numbers_or_text_and_defaults_to_all() -> None:
    whole = repo_params()
    base = {"fixtures": {"100K": "fixtures/slices.json"}, "tokenizer": "cl100k_base"}

    def with_slice(section: dict[str, object]) -> SliceParams:
        return parse_params(whole | {"slice": section}).slice

    assert with_slice(base).conversations == []
    # `dvc exp run -S 'slice.conversations=[4]'` writes a number
    assert with_slice(base | {"conversations": [4, "17"]}).conversations == ["4", "17"]
    for bad in ("4", [True], [None]):
        with pytest.raises(ParamsError, match=r"slice\.conversations"):
            with_slice(base | {"conversations": bad})


def test_stage_reads_the_restriction_from_params(
    tmp_path: Path,
    data: Path,
    pinned: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "data" / "repair").mkdir(parents=True)
    shutil.copy(data, tmp_path / "data" / "repair" / "dataset.parquet")
    write_params(
        tmp_path, mode="full", slice={"fixtures": {"100K": str(pinned)}, "conversations": [17]}
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["stages.slice"])

    main()

    assert "slice (tier 100K, full, conversations 17 only): 20 questions" in capsys.readouterr().out
    assert [p.name for p in (tmp_path / "data" / "slice" / "chats").iterdir()] == ["conv17.json"]


def test_estimate_counts_only_the_kept_conversations(
    tmp_path: Path, data: Path, pinned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commands.estimate import estimate_mode

    (tmp_path / "data" / "repair").mkdir(parents=True)
    shutil.copy(data, tmp_path / "data" / "repair" / "dataset.parquet")
    monkeypatch.chdir(tmp_path)
    agent_calls = {}
    for kept in ([], [4]):
        path = write_params(
            tmp_path, slice={"fixtures": {"100K": str(pinned)}, "conversations": kept}
        )
        agent_calls[str(kept)] = estimate_mode(read_params(path), "full")["agent"].calls
    per_question = agent_calls["[]"] / 40
    assert agent_calls["[4]"] == 20 * per_question


def _collect_keys(value: object, keys: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            keys.add(key)
            _collect_keys(item, keys)
    elif isinstance(value, list):
        for item in value:
            _collect_keys(item, keys)
