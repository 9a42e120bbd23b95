"""repair and slice read and write one conversation at a time: the repaired parquet holds a row
group per conversation with the same content as the whole-table repair, the slice of a file in
one row group and of one in many is the same to the byte, a release file changed while it is
read is refused, and the synthetic 10M-size release (tests/support/synthetic_10m.py, small here)
goes through repair, `slice --repin` and slice."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.repair import repair_table
from bench.verify_hash import FileReceipt, Receipt
from clients.files import atomic_file
from schemas.errors import IntegrityError
from schemas.params import RepairParams
from stages.repair import VerifiedFile, repair
from stages.slice import make_slices, repin
from tests.bench.test_repair import params, verified
from tests.bench.test_slice import fixture_dict
from tests.conftest import REPO_ROOT
from tests.support import synthetic_10m
from tests.support import synthetic_beam as beam


def test_repair_writes_a_row_group_per_conversation_with_the_whole_table_repairs_content(
    tmp_path: Path,
) -> None:
    receipt = verified(tmp_path)
    out, record_path = tmp_path / "repair" / "dataset.parquet", tmp_path / "repair" / "record.json"

    record = repair(receipt, "100K", params(), out, record_path)

    whole, whole_record = repair_table(beam.table(), params().messages, "100K", "synthetic")
    written = pq.ParquetFile(out)
    assert written.num_row_groups == whole.num_rows == len(beam.rows())
    assert pq.read_table(out).equals(whole)
    source = Receipt.model_validate_json(receipt.read_text()).files[0].path
    assert written.schema_arrow.equals(pq.ParquetFile(source).schema_arrow, check_metadata=True)
    assert record == whole_record


def test_a_release_file_changed_while_it_is_read_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "d.parquet"
    sha = beam.write_parquet(source)
    opened = VerifiedFile(
        FileReceipt(path=str(source), size_bytes=source.stat().st_size, sha256=sha)
    )
    opened.check_unchanged()  # as verified

    beam.write_parquet(source, beam.rows()[:1])  # another file in its place
    with pytest.raises(IntegrityError, match="changed while the repair read it"):
        opened.check_unchanged()


def test_a_release_file_that_no_longer_hashes_to_its_receipt_is_refused(tmp_path: Path) -> None:
    receipt = verified(tmp_path)
    source = Path(Receipt.model_validate_json(receipt.read_text()).files[0].path)
    beam.write_parquet(source, beam.rows()[:1])
    out, record_path = tmp_path / "repair" / "dataset.parquet", tmp_path / "repair" / "record.json"

    with pytest.raises(IntegrityError, match="changed after it was verified"):
        repair(receipt, "100K", params(), out, record_path)
    assert not out.exists() and not record_path.exists()


def test_the_slice_of_one_row_group_and_of_one_per_conversation_is_the_same(
    tmp_path: Path,
) -> None:
    one = tmp_path / "one.parquet"
    beam.write_parquet(one)  # the whole table in one row group, as the repair wrote it before
    many = tmp_path / "many.parquet"
    with pq.ParquetWriter(many, beam.table().schema, compression="zstd") as writer:
        for row in beam.rows():
            writer.write_table(beam.table([row]))
    assert pq.ParquetFile(one).num_row_groups == 1 < pq.ParquetFile(many).num_row_groups
    fixture = tmp_path / "fixtures" / "slices.json"
    fixture.parent.mkdir()
    fixture.write_text(json.dumps(fixture_dict()))
    repin(one, fixture, "cl100k_base")
    outs = []
    for source in (one, many):
        out = tmp_path / source.stem
        make_slices(source, fixture, "full", "cl100k_base", out, tmp_path / f"{source.stem}.json")
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert len(files) > 5
    for name in files:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_atomic_file_leaves_nothing_when_the_writer_fails(tmp_path: Path) -> None:
    out = tmp_path / "d" / "x.parquet"
    with pytest.raises(RuntimeError), atomic_file(out) as partial:
        partial.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert not out.exists() and os.listdir(out.parent) == []
    with atomic_file(out) as partial:
        partial.write_bytes(b"whole")
    assert out.read_bytes() == b"whole" and os.listdir(out.parent) == ["x.parquet"]


def test_the_synthetic_10m_release_goes_through_repair_and_slice_in_its_layout(
    tmp_path: Path,
) -> None:
    raw = json.loads((REPO_ROOT / "fixtures" / "slices-10M.json").read_text())
    kept = ["7", "8"]
    questions = synthetic_10m.questions_per_conversation(
        [q for q in raw["modes"]["all"]["question_ids"] if q.split(":")[0][4:] in kept]
    )
    shape = synthetic_10m.Shape(sessions_per_plan=2, messages_per_session=6)
    files = synthetic_10m.write_release(tmp_path / "release", questions, 20_000, shape=shape)
    assert [p.name for p in files] == ["10M-00000-of-00002.parquet", "10M-00001-of-00002.parquet"]
    shards = [pq.ParquetFile(p) for p in files]
    assert [s.metadata.num_rows for s in shards] == [1, 1]
    assert shards[0].schema_arrow == synthetic_10m.SCHEMA
    assert (
        files[0].read_bytes()
        == synthetic_10m.write_release(tmp_path / "again", questions, 20_000, shape=shape)[
            0
        ].read_bytes()
    )  # deterministic
    receipt = tmp_path / "receipt.json"
    receipt.write_text(
        Receipt(
            tier="10M",
            files=[
                FileReceipt(
                    path=str(p), size_bytes=p.stat().st_size, sha256=synthetic_10m.file_sha256(p)
                )
                for p in files
            ],
        ).model_dump_json()
    )
    out = tmp_path / "repair" / "dataset.parquet"
    record = repair(receipt, "10M", RepairParams(messages=[]), out, tmp_path / "record.json")
    assert record.messages_changed == 0 and pq.ParquetFile(out).num_row_groups == 2

    fixture = tmp_path / "slices-10M.json"
    for mode in raw["modes"].values():
        mode["question_ids"] = [q for q in mode["question_ids"] if q.split(":")[0][4:] in kept]
        mode["conversations"] = [c for c in mode["conversations"] if c in kept]
    fixture.write_text(json.dumps(raw))
    repin(out, fixture, "cl100k_base")
    built, _ = make_slices(out, fixture, "all", "cl100k_base", tmp_path / "s", tmp_path / "m")

    messages = synthetic_10m.PLANS * 2 * 6
    assert [s.message_ids for s in built.slices] == [list(range(messages))] * 2
    assert [s.sessions for s in built.slices] == [synthetic_10m.PLANS * 2] * 2
    assert all(s.tokens > 10_000 for s in built.slices)
    assert len(built.questions) == sum(sum(q.values()) for q in questions.values())
    shutil.rmtree(tmp_path / "release")
