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

from bench.repair import (
    FILLER_CHARS,
    REPIN_COMMAND,
    cut_filler,
    load_table,
    marker,
    propose_repair,
    proposed_sound_chars,
    repair_table,
    repin_params_text,
)
from bench.verify_hash import Receipt
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.params import RepairParams
from stages.repair import repair, verified_message_sha256
from tests.conftest import REPO_ROOT
from tests.support import synthetic_beam as beam
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)


def params(**changes: object) -> RepairParams:
    base = {
        "conversation_id": "4",
        "message_id": 97,
        "original_sha256": beam.BROKEN_SHA256,
        "sound_chars": len(beam.SOUND),
    }
    return RepairParams.model_validate(base | changes)


def verified(tmp_path: Path, data: list[dict[str, object]] | pa.Table | None = None) -> Path:
    """A parquet plus the receipt verify-hash would write for it."""
    source = tmp_path / "data" / "fetch" / "dataset.parquet"
    sha = beam.write_parquet(source, data)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    receipt.parent.mkdir(parents=True, exist_ok=True)
    receipt.write_text(
        Receipt(path=str(source), size_bytes=source.stat().st_size, sha256=sha).model_dump_json()
    )
    return receipt


def messages(tbl: pa.Table) -> dict[tuple[str, int], dict[str, object]]:
    out = {}
    for row in tbl.to_pylist():
        for session in row["chat"]:
            for m in session:
                out[(row["conversation_id"], m["id"])] = m
    return out


def test_cut_keeps_the_sound_text_and_says_how_much_was_cut() -> None:
    repaired, record = cut_filler(beam.BROKEN, params(), "m97")

    cut = len(beam.BROKEN) - len(beam.SOUND)
    assert repaired == beam.SOUND + marker(cut)
    assert f"{cut:,} characters" in repaired
    assert (record.chars_before, record.chars_kept, record.chars_cut) == (
        len(beam.BROKEN),
        len(beam.SOUND),
        cut,
    )
    assert record.chars_after == len(repaired)
    assert (record.conversation_id, record.message_id, record.messages_changed) == (4, 97, 1)


def test_tampered_message_is_refused_with_provenance_and_repin_command() -> None:
    tampered = beam.BROKEN.replace("diagram", "drawing")

    with pytest.raises(IntegrityError) as info:
        cut_filler(tampered, params(), "conversation 4, message 97")

    text = str(info.value)
    assert beam.BROKEN_SHA256 in text
    assert hashlib.sha256(tampered.encode()).hexdigest() in text
    assert "public repository's copy" in text and "release file" in text
    assert REPIN_COMMAND in text
    assert "Refusing to cut blindly" in text


def test_non_filler_after_the_sound_text_is_refused() -> None:
    text = beam.SOUND + "   |  more real words here" + "  \n"
    pinned = params(original_sha256=hashlib.sha256(text.encode()).hexdigest())

    with pytest.raises(IntegrityError, match=rf"character {len(beam.SOUND) + 6:,} is 'm'"):
        cut_filler(text, pinned, "m97")


def test_sound_text_must_not_end_in_filler() -> None:
    with pytest.raises(IntegrityError, match="is filler"):
        cut_filler(beam.BROKEN, params(sound_chars=len(beam.SOUND) + 2), "m97")


def test_message_shorter_than_the_sound_text_is_refused() -> None:
    short = beam.SOUND[:10]
    pinned = params(original_sha256=hashlib.sha256(short.encode()).hexdigest())
    with pytest.raises(IntegrityError, match="nothing to cut"):
        cut_filler(short, pinned, "m97")


def test_every_other_value_passes_through_unchanged() -> None:
    original = beam.table()

    repaired, _ = repair_table(original, params(), "synthetic")

    assert repaired.schema == original.schema
    for name in original.column_names:
        if name != "chat":
            assert repaired.column(name).equals(original.column(name)), name
    before, after = messages(original), messages(repaired)
    assert before.keys() == after.keys()
    changed = [key for key in before if before[key] != after[key]]
    assert changed == [("4", 97)]
    for key in before:
        if key != ("4", 97):
            assert str(after[key]["content"]).encode() == str(before[key]["content"]).encode()


def test_repair_writes_parquet_and_record_deterministically(tmp_path: Path) -> None:
    receipt = verified(tmp_path)
    out, metrics = tmp_path / "repair" / "dataset.parquet", tmp_path / "repair" / "record.json"

    record = repair(receipt, params(), out, metrics)
    first = out.read_bytes()
    repair(receipt, params(), out, metrics)

    assert out.read_bytes() == first
    assert json.loads(metrics.read_text()) == record.model_dump()
    assert all(isinstance(v, int) for v in json.loads(metrics.read_text()).values())
    content = messages(pq.read_table(out))[("4", 97)]["content"]
    assert content == beam.SOUND + marker(record.chars_cut)


def test_file_changed_after_verification_is_refused(tmp_path: Path) -> None:
    receipt = verified(tmp_path)
    source = Path(json.loads(receipt.read_text())["path"])
    source.write_bytes(source.read_bytes() + b"\0")
    out, metrics = tmp_path / "out.parquet", tmp_path / "repair.json"
    out.write_bytes(b"stale")

    with pytest.raises(IntegrityError, match="changed after it was verified"):
        repair(receipt, params(), out, metrics)
    assert not out.exists() and not metrics.exists()


def test_without_a_receipt_repair_does_not_read_the_file(tmp_path: Path) -> None:
    beam.write_parquet(tmp_path / "data" / "fetch" / "dataset.parquet")

    with pytest.raises(IntegrityError, match="has not been verified"):
        repair(tmp_path / "receipt.json", params(), tmp_path / "o.parquet", tmp_path / "m.json")


def test_truncated_parquet_is_a_clear_data_error(tmp_path: Path) -> None:
    good = beam.parquet_bytes()
    source = tmp_path / "d.parquet"
    source.write_bytes(good[: len(good) // 2])
    receipt = tmp_path / "receipt.json"
    receipt.write_text(
        Receipt(
            path=str(source),
            size_bytes=len(good) // 2,
            sha256=hashlib.sha256(good[: len(good) // 2]).hexdigest(),
        ).model_dump_json()
    )

    with pytest.raises(DataError, match="not a readable parquet file"):
        repair(receipt, params(), tmp_path / "o.parquet", tmp_path / "m.json")
    assert not (tmp_path / "o.parquet").exists()


def test_missing_column_is_named(tmp_path: Path) -> None:
    receipt = verified(tmp_path, beam.table().drop_columns(["chat"]))

    with pytest.raises(DataError, match=r"lacks column\(s\) \['chat'\]"):
        repair(receipt, params(), tmp_path / "o.parquet", tmp_path / "m.json")


def test_missing_conversation_is_named(tmp_path: Path) -> None:
    receipt = verified(tmp_path, [r for r in beam.rows() if r["conversation_id"] != "4"])

    with pytest.raises(DataError, match="no conversation '4'"):
        repair(receipt, params(), tmp_path / "o.parquet", tmp_path / "m.json")


def test_missing_message_is_named() -> None:
    with pytest.raises(DataError, match="no message with id 999"):
        repair_table(beam.table(), params(message_id=999), "synthetic")


def test_load_table_rejects_garbage() -> None:
    with pytest.raises(DataError, match="not a readable parquet"):
        load_table(b"definitely not parquet", "x")


PARAMS_TEXT = """\
# comment kept
fetch:
  original_sha256: keep-me  # another section's key of the same name
repair:
  conversation_id: "4"
  original_sha256: old  # the pin
  sound_chars: 10
slice:
  fixture: f
"""


def test_repin_params_text_changes_only_the_repair_pin() -> None:
    new = repin_params_text(PARAMS_TEXT, "a" * 64)

    assert new == PARAMS_TEXT.replace("original_sha256: old", f"original_sha256: {'a' * 64}")
    with pytest.raises(ParamsError, match="no `original_sha256:` line"):
        repin_params_text("repair:\n  message_id: 1\n", "a" * 64)


def test_repin_finds_the_hash_after_checking_the_filler_and_keeps_the_params_text(
    tmp_path: Path,
) -> None:
    changed = beam.rows()
    new_text = beam.SOUND + "  \n  |" + " " * 30
    changed[0]["chat"][1][37]["content"] = new_text  # message 97 of conversation "4"
    receipt = verified(tmp_path, changed)

    found = verified_message_sha256(receipt, params())
    text = repin_params_text(PARAMS_TEXT, found)

    assert found == hashlib.sha256(new_text.encode()).hexdigest()
    assert f"original_sha256: {found}  # the pin" in text
    assert "# comment kept" in text


def test_stage_process_refuses_a_tampered_message_with_exit_2(tmp_path: Path) -> None:
    changed = beam.rows()
    changed[0]["chat"][1][37]["content"] = beam.BROKEN + " extra"
    verified(tmp_path, changed)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    data = json.loads(receipt.read_text())
    data["path"] = "data/fetch/dataset.parquet"  # as the stage writes it: relative to the repo
    receipt.write_text(json.dumps(data))
    write_params(
        tmp_path,
        repair={
            "conversation_id": "4",
            "message_id": 97,
            "original_sha256": beam.BROKEN_SHA256,
            "sound_chars": len(beam.SOUND),
        },
    )

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
    filler = "".join(sorted(FILLER_CHARS))
    assert proposed_sound_chars(beam.BROKEN, filler) == len(beam.SOUND)
    assert proposed_sound_chars("/\n/\n", "/\n") == 0  # nothing sound: nothing kept
    assert proposed_sound_chars("answer", "/\n") == len("answer")  # no filler: no cut
    proposal = propose_repair(beam.table(), "4", 97, filler, "t.parquet")
    assert (proposal.sound_chars, proposal.original_sha256) == (len(beam.SOUND), beam.BROKEN_SHA256)
    # without one, the filler is the characters of the message's last 200
    assert propose_repair(beam.table(), "4", 97, None, "t").filler == "".join(
        sorted(set(beam.BROKEN[-200:]))
    )
    assert proposal.before == beam.SOUND[-len(proposal.before) :]
    cut_filler(beam.BROKEN, params(sound_chars=proposal.sound_chars), "m97")  # accepted as a pin


def test_propose_prints_the_cut_and_writes_nothing(tmp_path: Path) -> None:
    verified(tmp_path)
    receipt = tmp_path / "data" / "verify_hash" / "receipt.json"
    data = json.loads(receipt.read_text())
    data["path"] = "data/fetch/dataset.parquet"  # as the stage writes it: relative to the repo
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
    assert f"original_sha256: {beam.BROKEN_SHA256}" in done.stdout
    assert "nothing was written" in done.stdout
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
