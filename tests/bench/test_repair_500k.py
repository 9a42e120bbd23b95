"""The pinned 500K repairs on the real 500K chats (the shared copy's parquet in the Hub's layout):
each cuts where its pin says, nothing else changes, the data check then finds no runaway message,
a tampered message is refused, and the proposal tool finds each pinned cut (the pins keep the
first copy of a repeated block, one block after the proposed start)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from bench.data_check import check_chat
from bench.repair import load_table, propose_repair, repair_table, repeat_period
from bench.slice import build_slice
from schemas.errors import IntegrityError
from schemas.params import Repair
from stages.common import read_params
from tests.bench.test_data_check import RUNAWAY_500K
from tests.conftest import REPO_ROOT, SHARED_BEAM, skip_or_fail

pytestmark = pytest.mark.beam

PARQUET_500K = SHARED_BEAM / "mirror/datasets/Mohammadta/BEAM/data/500K-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def table() -> pa.Table:
    if not PARQUET_500K.is_file():
        skip_or_fail(f"the 500K parquet is not in {PARQUET_500K.parent}")
    return load_table(PARQUET_500K.read_bytes(), str(PARQUET_500K))


def pins() -> list[Repair]:
    return [r for r in read_params(REPO_ROOT / "params.yaml").repair.messages if r.tier == "500K"]


def messages(tbl: pa.Table) -> Iterator[tuple[str, dict[str, Any]]]:
    for row in tbl.select(["conversation_id", "chat"]).to_pylist():
        for session in row["chat"]:
            for message in session:
                yield row["conversation_id"], message


def test_every_runaway_message_of_the_500k_chats_is_pinned_once() -> None:
    pinned: dict[str, list[int]] = {}
    for repair in pins():
        pinned.setdefault(repair.conversation_id, []).append(repair.message_id)
    assert pinned == RUNAWAY_500K


def test_the_500k_repairs_cut_only_their_messages_and_leave_no_runaway(table: pa.Table) -> None:
    repaired, record = repair_table(table, pins(), "500K", "500K")

    assert (record.tier, record.messages_changed) == ("500K", 15)
    by_id = {(r.conversation_id, r.message_id): r for r in record.repairs}
    before = dict(((c, m["id"]), m) for c, m in messages(table))
    after = dict(((c, m["id"]), m) for c, m in messages(repaired))
    assert before.keys() == after.keys()
    changed = {key for key in before if before[key] != after[key]}
    assert changed == set(by_id)
    for key in changed:
        assert after[key]["content"].startswith(before[key]["content"][: by_id[key].chars_kept])
        assert len(after[key]["content"]) == by_id[key].chars_after < by_id[key].chars_before
    for row in repaired.select(["conversation_id", "chat"]).to_pylist():
        chat = build_slice(row["conversation_id"], row["chat"], None)
        assert [f for f in check_chat(chat, whole=True) if f.kind == "runaway_message"] == []
    # of the 15 messages' 778,890 characters (28:305 alone is 246,463)
    assert record.chars_cut == 746_940
    assert sum(r.chars_before for r in record.repairs) == 778_890


def test_a_tampered_500k_message_is_refused(table: pa.Table) -> None:
    rows = table.to_pylist()
    row = next(r for r in rows if r["conversation_id"] == "28")
    message = next(m for s in row["chat"] for m in s if m["id"] == 519)
    message["content"] = message["content"].replace("|", "!", 1)
    tampered = pa.Table.from_pylist(rows, schema=table.schema)

    with pytest.raises(IntegrityError, match="conversation 28, message 519 is not the message"):
        repair_table(tampered, pins(), "500K", "tampered")


def test_the_proposal_tool_finds_each_pinned_500k_cut(table: pa.Table) -> None:
    contents = {(c, m["id"]): m["content"] for c, m in messages(table)}
    for pin in pins():
        proposal = propose_repair(
            table, "500K", pin.conversation_id, pin.message_id, pin.rest, pin.filler or None, "t"
        )
        assert proposal.original_sha256 == pin.original_sha256
        kept_copy = 0  # a filler cut keeps no filler
        if pin.rest == "repeated_lines":  # the pin keeps the first copy of the repeated block
            whole = contents[pin.conversation_id, pin.message_id][proposal.sound_chars :]
            lines = whole.split("\n")[:-1]
            kept_copy = sum(len(line) + 1 for line in lines[: repeat_period(lines)])
        assert proposal.sound_chars + kept_copy == pin.sound_chars, (
            pin.conversation_id,
            pin.message_id,
        )


def test_the_pins_say_why_in_words_of_their_own() -> None:
    # the reason is a sentence a person wrote, never a quote of the chat
    for pin in pins():
        assert len(pin.why) > 60 and pin.why.endswith("."), pin.why
    assert json.dumps([p.why for p in pins()]).count("\\n") == 0
