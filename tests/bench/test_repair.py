"""repair on the synthetic dataset: the cut, its refusals, pass-through, receipts, re-pin."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import ValidationError

from bench.repair import (
    REPIN_COMMAND,
    cut_message,
    filler_names,
    load_table,
    marker,
    propose_repair,
    proposed_repeated_lines_cut,
    proposed_sound_chars,
    repair_table,
    repin_params_text,
)
from bench.verify_hash import FileReceipt, Receipt
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.params import Repair, RepairParams, Tier
from stages.repair import repair, repin
from tests.conftest import REPO_ROOT
from tests.support import synthetic_beam as beam
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)


FILLER = " |\\\n"
"""The synthetic message 97's filler characters, as pinned for the real one."""


def pin(**changes: object) -> Repair:
    """The repair of the synthetic conversation 4's message 97."""
    base = {
        "tier": "100K",
        "conversation_id": "4",
        "message_id": 97,
        "original_sha256": beam.BROKEN_SHA256,
        "sound_chars": len(beam.SOUND),
        "rest": "filler",
        "filler": FILLER,
        "why": "a diagram that runs on as filler",
    }
    return Repair.model_validate(base | changes)


def params(*repairs: Repair) -> RepairParams:
    return RepairParams(messages=list(repairs) if repairs else [pin()])


REPEATED = beam.SOUND + "\n" + "build > \n" * 30 + "build"
"""A message whose answer ends in one line repeated, the last copy cut short."""


def repeated_pin(**changes: object) -> Repair:
    base = {
        "original_sha256": hashlib.sha256(REPEATED.encode()).hexdigest(),
        "sound_chars": len(beam.SOUND) + 1,
        "rest": "repeated_lines",
        "filler": "",
    }
    return pin(**(base | changes))


def verified(tmp_path: Path, data: list[dict[str, object]] | pa.Table | None = None) -> Path:
    """A parquet plus the receipt verify-hash would write for it."""
    source = tmp_path / "data" / "fetch" / "dataset" / "d.parquet"
    sha = beam.write_parquet(source, data)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    receipt.parent.mkdir(parents=True, exist_ok=True)
    receipt.write_text(receipt_json(source, sha))
    return receipt


def receipt_json(source: Path, sha: str, *, tier: Tier = "100K") -> str:
    """The receipt verify-hash writes for one file."""
    size = source.stat().st_size
    files = [FileReceipt(path=str(source), size_bytes=size, sha256=sha)]
    return Receipt(tier=tier, files=files).model_dump_json()


def messages(tbl: pa.Table) -> dict[tuple[str, int], dict[str, object]]:
    out = {}
    for row in tbl.to_pylist():
        for session in row["chat"]:
            for m in session:
                out[(row["conversation_id"], m["id"])] = m
    return out


def test_cut_keeps_the_sound_text_and_says_how_much_was_cut() -> None:
    repaired, record = cut_message(beam.BROKEN, pin(), "m97")

    cut = len(beam.BROKEN) - len(beam.SOUND)
    assert repaired == beam.SOUND + marker(cut, pin(), beam.FILLER)
    # the words of the marker the first repair has always written (its slices are pinned)
    assert repaired.endswith(
        f"\n\n[repair: {cut:,} characters of runaway filler (spaces, '|', '\\' and newlines) "
        "were cut here]"
    )
    assert (record.chars_before, record.chars_kept, record.chars_cut) == (
        len(beam.BROKEN),
        len(beam.SOUND),
        cut,
    )
    assert record.chars_after == len(repaired)
    assert (record.conversation_id, record.message_id, record.rest) == ("4", 97, "filler")


def test_a_repeated_line_is_cut_from_its_first_copy_and_counted() -> None:
    repaired, record = cut_message(REPEATED, repeated_pin(), "m97")

    cut = REPEATED[len(beam.SOUND) + 1 :]
    assert repaired == beam.SOUND + "\n" + marker(len(cut), repeated_pin(), cut)
    assert repaired.endswith(
        f"[repair: {record.chars_cut:,} characters of one line repeated 30 times were cut here]"
    )
    assert record.chars_cut == len("build > \n") * 30 + len("build")


@pytest.mark.parametrize(
    ("text", "sound", "error"),
    [
        (beam.SOUND + "\nbuild > \nbuild > \nreal words\n", 1, "not one block"),
        (beam.SOUND + "\nbuild > \nbuild > \nbuild > more", 1, "not one block"),
        (beam.SOUND + "\nbuild > \nbuild", 1, "not one block"),
        (beam.SOUND + "\na\nb\na\nc\n", 1, "not one block"),
        (beam.SOUND + "\nbuild > \nbuild > \n", 0, "does not start a line"),
    ],
)
def test_a_cut_that_is_not_one_block_of_lines_repeated_is_refused(
    text: str, sound: int, error: str
) -> None:
    pinned = repeated_pin(
        original_sha256=hashlib.sha256(text.encode()).hexdigest(),
        sound_chars=len(beam.SOUND) + sound,
    )
    with pytest.raises(IntegrityError, match=error):
        cut_message(text, pinned, "m")


def test_a_block_of_lines_repeated_is_cut_and_named_with_its_size() -> None:
    block = "\\[ S = 4 \\]\n\n"
    text = beam.SOUND + "\nCombine:\n" + block * 12 + "\\[ S"
    sound = len(beam.SOUND) + len("\nCombine:\n")
    pinned = repeated_pin(
        original_sha256=hashlib.sha256(text.encode()).hexdigest(), sound_chars=sound
    )

    repaired, done = cut_message(text, pinned, "m")

    assert repaired.endswith("characters of a block of 2 lines repeated 12 times were cut here]")
    assert done.chars_cut == len(block) * 12 + len("\\[ S")
    assert proposed_repeated_lines_cut(text) == sound
    garbled = beam.SOUND + "\n" + "|   |\n" * 5 + "| ||"  # the last copy garbled, same characters
    assert proposed_repeated_lines_cut(garbled) == len(beam.SOUND) + 1


def test_filler_names_read_as_the_marker_says_them() -> None:
    assert filler_names(FILLER) == "spaces, '|', '\\' and newlines"
    assert filler_names(" /\n") == "spaces, '/' and newlines"
    assert filler_names("/") == "'/'"


def test_a_pin_names_its_filler_exactly_when_it_cuts_filler_and_each_message_once() -> None:
    with pytest.raises(ValidationError, match="exactly when `rest` is `filler`"):
        pin(filler="")
    with pytest.raises(ValidationError, match="exactly when `rest` is `filler`"):
        repeated_pin(filler=" ")
    with pytest.raises(ValidationError, match="why"):
        pin(why="")
    with pytest.raises(ValidationError, match="pinned twice"):
        RepairParams(messages=[pin(), pin(sound_chars=3)])
    RepairParams(messages=[pin(), pin(tier="500K")])  # the same ids in another tier


def test_tampered_message_is_refused_with_provenance_and_repin_command() -> None:
    tampered = beam.BROKEN.replace("diagram", "drawing")

    with pytest.raises(IntegrityError) as info:
        cut_message(tampered, pin(), "conversation 4, message 97")

    text = str(info.value)
    assert beam.BROKEN_SHA256 in text
    assert hashlib.sha256(tampered.encode()).hexdigest() in text
    assert "public repository's copy" in text and "release file" in text
    assert REPIN_COMMAND in text
    assert "Refusing to cut blindly" in text


def test_non_filler_after_the_sound_text_is_refused() -> None:
    text = beam.SOUND + "   |  more real words here" + "  \n"
    pinned = pin(original_sha256=hashlib.sha256(text.encode()).hexdigest())

    with pytest.raises(IntegrityError, match=rf"character {len(beam.SOUND) + 6:,} is 'm'"):
        cut_message(text, pinned, "m97")
    with pytest.raises(IntegrityError, match=r"character [\d,]+ is '\|'"):  # not this pin's filler
        cut_message(beam.BROKEN, pin(filler=" \\\n"), "m97")


def test_sound_text_must_not_end_in_filler() -> None:
    with pytest.raises(IntegrityError, match="is filler"):
        cut_message(beam.BROKEN, pin(sound_chars=len(beam.SOUND) + 2), "m97")


def test_message_shorter_than_the_sound_text_is_refused() -> None:
    short = beam.SOUND[:10]
    pinned = pin(original_sha256=hashlib.sha256(short.encode()).hexdigest())
    with pytest.raises(IntegrityError, match="nothing to cut"):
        cut_message(short, pinned, "m97")


def test_every_other_value_passes_through_unchanged() -> None:
    original = beam.table()

    repaired, record = repair_table(original, [pin()], "100K", "synthetic")

    assert repaired.schema == original.schema
    for name in original.column_names:
        if name != "chat":
            assert repaired.column(name).equals(original.column(name)), name
    before, after = messages(original), messages(repaired)
    assert before.keys() == after.keys()
    changed = [key for key in before if before[key] != after[key]]
    assert changed == [("4", 97)]
    assert (record.tier, record.messages_changed) == ("100K", 1)
    assert record.chars_cut == record.repairs[0].chars_cut == len(beam.FILLER)
    for key in before:
        if key != ("4", 97):
            assert str(after[key]["content"]).encode() == str(before[key]["content"]).encode()


def test_repair_writes_parquet_and_record_deterministically(tmp_path: Path) -> None:
    receipt = verified(tmp_path)
    out, metrics = tmp_path / "repair" / "dataset.parquet", tmp_path / "repair" / "record.json"

    record = repair(receipt, "100K", params(), out, metrics)
    first = out.read_bytes()
    repair(receipt, "100K", params(), out, metrics)

    assert out.read_bytes() == first
    assert json.loads(metrics.read_text()) == record.model_dump()
    assert record.messages_changed == 1 and record.repairs[0].why == pin().why
    content = messages(pq.read_table(out))[("4", 97)]["content"]
    assert content == beam.SOUND + marker(record.chars_cut, pin(), beam.FILLER)


def test_a_release_in_two_shards_is_repaired_as_one_table_in_shard_order(tmp_path: Path) -> None:
    rows = beam.rows()
    shards = [tmp_path / "s0.parquet", tmp_path / "s1.parquet"]
    shas = [beam.write_parquet(shards[0], rows[1:]), beam.write_parquet(shards[1], rows[:1])]
    size = [p.stat().st_size for p in shards]
    files = [
        FileReceipt(path=str(p), size_bytes=n, sha256=h)
        for p, n, h in zip(shards, size, shas, strict=True)
    ]
    receipt = tmp_path / "receipt.json"
    receipt.write_text(Receipt(tier="100K", files=files).model_dump_json())
    out, record_path = tmp_path / "repair" / "dataset.parquet", tmp_path / "repair" / "record.json"

    record = repair(receipt, "100K", params(), out, record_path)

    repaired = pq.read_table(out)
    ids = [r["conversation_id"] for r in rows]
    assert repaired.column("conversation_id").to_pylist() == ids[1:] + ids[:1]
    assert record.messages_changed == 1  # the pinned message, in the second shard
    assert str(messages(repaired)[("4", 97)]["content"]).startswith(beam.SOUND)
    other = tmp_path / "other.parquet"
    beam.write_parquet(other, beam.table(rows[:1]).drop_columns(["narratives"]))
    odd = FileReceipt(path=str(other), size_bytes=other.stat().st_size, sha256=file_sha(other))
    receipt.write_text(Receipt(tier="100K", files=[files[0], odd]).model_dump_json())
    with pytest.raises(DataError, match="do not share one schema"):
        repair(receipt, "100K", params(), out, record_path)
    assert not out.exists()


def file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_only_the_fetched_tiers_repairs_are_applied_each_where_its_pin_says() -> None:
    rows = beam.rows()
    rows[1]["chat"][0][5]["content"] = REPEATED  # conversation "17", message 5
    elsewhere = pin(tier="500K", conversation_id="99", original_sha256="0" * 64)

    repaired, record = repair_table(
        beam.table(rows),
        [elsewhere, pin(), repeated_pin(conversation_id="17", message_id=5)],
        "100K",
        "synthetic",
    )

    after = messages(repaired)
    assert [(r.conversation_id, r.message_id, r.rest) for r in record.repairs] == [
        ("4", 97, "filler"),
        ("17", 5, "repeated_lines"),
    ]
    assert record.chars_cut == sum(r.chars_cut for r in record.repairs)
    assert str(after[("17", 5)]["content"]).startswith(beam.SOUND + "\n\n\n[repair: ")
    assert str(after[("4", 97)]["content"]).startswith(beam.SOUND + "\n\n[repair: ")


def test_file_changed_after_verification_is_refused(tmp_path: Path) -> None:
    receipt = verified(tmp_path)
    source = Path(json.loads(receipt.read_text())["files"][0]["path"])
    source.write_bytes(source.read_bytes() + b"\0")
    out, metrics = tmp_path / "out.parquet", tmp_path / "repair.json"
    out.write_bytes(b"stale")

    with pytest.raises(IntegrityError, match="changed after it was verified"):
        repair(receipt, "100K", params(), out, metrics)
    assert not out.exists() and not metrics.exists()


def test_without_a_receipt_repair_does_not_read_the_file(tmp_path: Path) -> None:
    beam.write_parquet(tmp_path / "data" / "fetch" / "dataset" / "d.parquet")

    with pytest.raises(IntegrityError, match="has not been verified"):
        repair(
            tmp_path / "receipt.json", "100K", params(), tmp_path / "o.parquet", tmp_path / "m.json"
        )


def test_truncated_parquet_is_a_clear_data_error(tmp_path: Path) -> None:
    good = beam.parquet_bytes()
    source = tmp_path / "d.parquet"
    source.write_bytes(good[: len(good) // 2])
    receipt = tmp_path / "receipt.json"
    receipt.write_text(receipt_json(source, hashlib.sha256(good[: len(good) // 2]).hexdigest()))

    with pytest.raises(DataError, match="not a readable parquet file"):
        repair(receipt, "100K", params(), tmp_path / "o.parquet", tmp_path / "m.json")
    assert not (tmp_path / "o.parquet").exists()


def test_missing_column_is_named(tmp_path: Path) -> None:
    receipt = verified(tmp_path, beam.table().drop_columns(["chat"]))

    with pytest.raises(DataError, match=r"lacks column\(s\) \['chat'\]"):
        repair(receipt, "100K", params(), tmp_path / "o.parquet", tmp_path / "m.json")


def test_missing_conversation_is_named(tmp_path: Path) -> None:
    receipt = verified(tmp_path, [r for r in beam.rows() if r["conversation_id"] != "4"])

    with pytest.raises(DataError, match="no conversation '4'"):
        repair(receipt, "100K", params(), tmp_path / "o.parquet", tmp_path / "m.json")


def test_missing_message_is_named() -> None:
    with pytest.raises(DataError, match="no message with id 999"):
        repair_table(beam.table(), [pin(message_id=999)], "100K", "synthetic")


def test_load_table_rejects_garbage() -> None:
    with pytest.raises(DataError, match="not a readable parquet"):
        load_table(b"definitely not parquet", "x")


PARAMS_TEXT = """\
# comment kept
fetch:
  original_sha256: keep-me  # another section's key of the same name
repair:
  messages:
    - tier: 100K
      conversation_id: "4"
      message_id: 9
      original_sha256: other  # another message
    - tier: 500K
      conversation_id: "4"
      message_id: 97
      original_sha256: other-tier
    - conversation_id: '4'
      tier: 100K
      message_id: 97
      original_sha256: old  # the pin
      sound_chars: 10
slice:
  fixture: f
"""


def test_repin_params_text_changes_only_that_repairs_pin() -> None:
    new = repin_params_text(PARAMS_TEXT, pin(), "a" * 64)

    assert new == PARAMS_TEXT.replace("original_sha256: old", f"original_sha256: {'a' * 64}")
    with pytest.raises(ParamsError, match="no entry of section `repair` for tier 100K, "):
        repin_params_text(PARAMS_TEXT, pin(message_id=1), "a" * 64)


def test_repin_rewrites_the_hash_of_each_changed_message_after_checking_its_cut(
    tmp_path: Path,
) -> None:
    changed = beam.rows()
    new_text = beam.SOUND + "  \n  |" + " " * 30
    changed[0]["chat"][1][37]["content"] = new_text  # message 97 of conversation "4"
    receipt = verified(tmp_path, changed)
    pins = tmp_path / "pins.yaml"
    pins.write_text(PARAMS_TEXT.replace("original_sha256: old", f"original_sha256: {'0' * 64}"))
    pinned = pin(original_sha256="0" * 64)

    done = repin(receipt, "100K", params(pinned), pins)

    found = hashlib.sha256(new_text.encode()).hexdigest()
    assert done == [f"conversation 4 message 97: {found}"]
    assert f"original_sha256: {found}  # the pin" in pins.read_text()
    assert "# comment kept" in pins.read_text()
    assert repin(receipt, "100K", params(pin(original_sha256=found)), pins) == []  # nothing left
    changed[0]["chat"][1][37]["content"] = new_text + "real words"
    with pytest.raises(IntegrityError, match="not filler"):
        repin(verified(tmp_path, changed), "100K", params(pinned), pins)


def test_stage_process_refuses_a_tampered_message_with_exit_2(tmp_path: Path) -> None:
    changed = beam.rows()
    changed[0]["chat"][1][37]["content"] = beam.BROKEN + " extra"
    verified(tmp_path, changed)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    data = json.loads(receipt.read_text())
    data["files"][0]["path"] = "data/fetch/dataset/d.parquet"  # as the stage writes it
    receipt.write_text(json.dumps(data))
    write_params(tmp_path, repair=params().model_dump())

    done = subprocess.run(
        [sys.executable, "-m", "stages.repair"],
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert "not the message the repair was pinned on" in done.stderr
    assert "python -m stages.repair --repin" in done.stderr
    assert not (tmp_path / "data" / "repair").exists() or not any(
        (tmp_path / "data" / "repair").iterdir()
    )
    assert not (tmp_path / "data" / "repair" / "record.json").exists()


def test_the_proposed_cut_is_where_the_filler_starts_and_passes_the_filler_check() -> None:
    assert proposed_sound_chars(beam.BROKEN, FILLER) == len(beam.SOUND)
    assert proposed_sound_chars("/\n/\n", "/\n") == 0  # nothing sound: nothing kept
    assert proposed_sound_chars("answer", "/\n") == len("answer")  # no filler: no cut
    proposal = propose_repair(beam.table(), "100K", "4", 97, "filler", FILLER, "t.parquet")
    assert (proposal.sound_chars, proposal.original_sha256) == (len(beam.SOUND), beam.BROKEN_SHA256)
    # without one, the filler is the characters of the message's last 200
    assert propose_repair(beam.table(), "100K", "4", 97, "filler", None, "t").filler == "".join(
        sorted(set(beam.BROKEN[-200:]))
    )
    assert proposal.before == beam.SOUND[-len(proposal.before) :]
    cut_message(beam.BROKEN, pin(sound_chars=proposal.sound_chars), "m97")  # accepted as a pin


def test_the_proposed_repeated_lines_cut_is_where_the_copies_begin() -> None:
    assert proposed_repeated_lines_cut(REPEATED) == len(beam.SOUND) + 1
    cut_message(REPEATED, repeated_pin(sound_chars=proposed_repeated_lines_cut(REPEATED)), "m")
    assert proposed_repeated_lines_cut(beam.SOUND) == len(beam.SOUND)  # no repeat: no cut
    assert proposed_repeated_lines_cut("a\nb\nb > \n") == len("a\nb\nb > \n")  # one copy
    assert proposed_repeated_lines_cut("x\nx\nx\nx") == 0  # all of it


def test_propose_prints_the_cut_and_writes_nothing(tmp_path: Path) -> None:
    verified(tmp_path)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    data = json.loads(receipt.read_text())
    data["files"][0]["path"] = "data/fetch/dataset/d.parquet"  # as the stage writes it
    receipt.write_text(json.dumps(data))
    write_params(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    done = subprocess.run(
        [sys.executable, "-m", "stages.repair", "--propose", "4", "97", "--filler", " |\\\\\\n"],
        cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert f"proposed sound_chars {len(beam.SOUND):,}" in done.stdout
    printed = done.stdout.split("is ---\n", 1)[1].replace("<", "'<").replace(">\n", ">'\n")
    assert Repair.model_validate(yaml.safe_load(printed)[0] | {"why": "a person's reason"}) == pin(
        why="a person's reason"
    )
    assert "nothing was written" in done.stdout
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
