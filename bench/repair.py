"""repair: cut the runaway output off the pinned messages; everything else passes through.

Reads the tier's release files only if their bytes hash to verify-hash's receipt (10M's two shards
joined in the pinned order), then writes `data/repair/dataset.parquet`: the same table (all columns,
rows and messages), except that each message pinned for the run's tier (pins.yaml `repair.messages`,
each with the reason a person gave) keeps its first `sound_chars` characters followed by a short
marker saying how many characters of what were cut. Before cutting it checks the message's sha256
against the pin (never cut blindly) and that what it cuts is what the pin says: only the pinned
filler characters, or one block of lines repeated to the end. What was done goes to
`data/repair/record.json` (a fact of the pinned release, not a measure: no DVC metric).

It holds one conversation at a time (`RepairPass`): the stage reads the release in batches of one
row and writes each conversation as its own row group of the output (zstd, the release's
schema), so the slice can read it back one conversation at a time too. The bytes therefore
differ from a whole-table write (`encode_table`: one row group), the content does not.

The pins were made from the public repository's copy of the chats (`../shared/beam`), because
the release file cannot be downloaded on the machines the project was built on. If a verified
release file holds a different message, the stage says so and names the re-pin command:
`python -m stages.repair --repin` rewrites each differing `original_sha256` in pins.yaml after
a person has looked at the messages and confirmed that the cuts are still right.

`python -m stages.repair --propose <conversation> <message> [--filler CHARS | --repeated-lines]`
prints where a cut of another message could go (`propose_repair`), with the text around it, for
a person to judge; it never writes a pin.

The stage (stages/repair.py) reads the receipt, the parquet and pins.yaml and writes the outs;
this module checks and cuts what it read.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.verify_hash import RECEIPT, FileReceipt, digest_bytes
from schemas.base import Record
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.layout import LAYOUT
from schemas.params import Repair, Rest, Tier

REPAIR_OUT = LAYOUT.repair.dataset
RECORD = LAYOUT.repair.record
REQUIRED_COLUMNS = ("conversation_id", "chat")
PIN_PROVENANCE = (
    "the pin was made from the public repository's copy of the chats (../shared/beam, BEAM "
    "repository commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3), and this release file, "
    "although it passed verify-hash, differs from that copy"
)
REPIN_COMMAND = "uv run --frozen python -m stages.repair --repin"


class RepairRecord(Record):
    """What one cut did."""

    conversation_id: str
    message_id: int
    rest: str
    """What was cut: `filler` characters or `repeated_lines`."""
    why: str
    chars_before: int
    chars_kept: int
    chars_cut: int
    chars_after: int


class RepairsRecord(Record):
    """What the repair stage did, as written to data/repair/record.json."""

    tier: Tier
    messages_changed: int
    chars_cut: int
    repairs: list[RepairRecord]


def check_verified(data: bytes, receipt: FileReceipt) -> bytes:
    """`data` (read from the receipt's file), refused unless it hashes to the receipt's sha256."""
    check_sha256(digest_bytes(data), receipt)
    return data


def check_sha256(found: str, receipt: FileReceipt) -> None:
    """IntegrityError unless `found` (the sha256 of the receipt's file now) is the receipt's."""
    if found != receipt.sha256:
        raise IntegrityError(
            f"{receipt.path} changed after it was verified: the receipt {RECEIPT} says sha256 "
            f"{receipt.sha256}, the file now hashes to {found}; run `dvc repro verify-hash`"
        )


def load_table(data: bytes, source: str, required: tuple[str, ...] = REQUIRED_COLUMNS) -> pa.Table:
    """Parse parquet bytes and check that the columns a stage needs are there."""
    try:
        # No Arrow thread pool: its teardown at interpreter exit can abort a process that is
        # leaving with an error (seen as "terminate called without an active exception").
        table = pq.read_table(pa.BufferReader(data), use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(
            f"{source} is not a readable parquet file ({exc}); it may be truncated: fetch it again"
        ) from exc
    check_columns(table.schema, source, required)
    return table


def check_columns(
    schema: pa.Schema, source: str, required: tuple[str, ...] = REQUIRED_COLUMNS
) -> None:
    """DataError unless the columns a stage needs are in `schema` (a release file's)."""
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise DataError(
            f"{source} lacks column(s) {missing}; expected the BEAM release layout with "
            f"{list(required)}, found {schema.names}"
        )


def check_shard_schemas(schemas: Sequence[pa.Schema], source: str) -> pa.Schema:
    """The one schema a release's shards share (their rows are read as one table, in shard
    order): DataError when their columns differ."""
    first = schemas[0]
    for other in schemas[1:]:
        if not other.equals(first, check_metadata=False):
            raise DataError(
                f"the shards of {source} do not share one schema: {first} and {other} differ"
            )
    return first


def join_shards(tables: Sequence[pa.Table], source: str) -> pa.Table:
    """A release's shards as one table, rows in shard order: DataError when their columns
    differ."""
    try:
        return pa.concat_tables(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataError(f"the shards of {source} do not share one schema: {exc}") from exc


def conversation_row(table: pa.Table, conversation_id: str, source: str) -> int:
    ids = table.column("conversation_id").to_pylist()
    if conversation_id not in ids:
        raise DataError(
            f"{source} has no conversation {conversation_id!r} (found {len(ids)}: {ids[:25]}); "
            "is this the run's tier?"
        )
    return int(ids.index(conversation_id))


def find_message(chat: object, message_id: int, where: str) -> dict[str, Any]:
    """The message of a chat's sessions with this id (the dict itself, to cut in place)."""
    if isinstance(chat, dict):
        raise DataError(
            f"{where}: the chat is held as plans (the 10M layout), and a repair of a message in a "
            "plan is not supported yet; leave it unrepaired (the data check reports it) until "
            "the repair stage reads plans"
        )
    for session in chat:  # type: ignore[attr-defined]
        for message in session:
            if message.get("id") == message_id:
                return message
    raise DataError(f"{where}: no message with id {message_id}")


def filler_names(filler: str) -> str:
    """The filler characters in words, in their pinned order (space: "spaces", newline:
    "newlines", any other in quotes), as the marker and the errors name them."""
    words = [CHAR_NAMES.get(char, f"'{char}'") for char in filler]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


CHAR_NAMES = {" ": "spaces", "\n": "newlines", "\t": "tabs"}


def marker(chars_cut: int, repair: Repair, cut: str) -> str:
    """What replaces the cut text: how much was cut, and what it was."""
    if repair.rest == "filler":
        what = f"runaway filler ({filler_names(repair.filler)})"
    else:
        whole = cut.split("\n")[:-1]
        period = repeat_period(whole) or 1
        copies = f"repeated {len(whole) // period:,} times"
        what = f"one line {copies}" if period == 1 else f"a block of {period} lines {copies}"
    return f"\n\n[repair: {chars_cut:,} characters of {what} were cut here]"


def cut_message(content: str, repair: Repair, where: str) -> tuple[str, RepairRecord]:
    """The repaired text and what was done; refuses unless the hash and `rest` match."""
    found = hashlib.sha256(content.encode("utf-8")).hexdigest()
    if found != repair.original_sha256:
        raise IntegrityError(
            f"{where} is not the message the repair was pinned on: expected sha256 "
            f"{repair.original_sha256}, found {found} ({len(content):,} characters). "
            f"Refusing to cut blindly: {PIN_PROVENANCE}. After a person has looked at the "
            f"message and confirmed the cut, re-pin with `{REPIN_COMMAND}`"
        )
    check_rest(content, repair, where)
    kept, cut = content[: repair.sound_chars], content[repair.sound_chars :]
    repaired = kept + marker(len(cut), repair, cut)
    record = RepairRecord(
        conversation_id=repair.conversation_id,
        message_id=repair.message_id,
        rest=repair.rest,
        why=repair.why,
        chars_before=len(content),
        chars_kept=len(kept),
        chars_cut=len(cut),
        chars_after=len(repaired),
    )
    return repaired, record


def check_rest(content: str, repair: Repair, where: str) -> None:
    """There is text to cut, and it is what the pin says (filler, or a block of lines repeated)."""
    if len(content) <= repair.sound_chars:
        raise IntegrityError(
            f"{where} has {len(content):,} characters, not more than the {repair.sound_chars:,} "
            "sound ones: there is nothing to cut; check its `sound_chars` in pins.yaml `repair`"
        )
    if repair.rest == "filler":
        check_filler(content, repair.sound_chars, repair.filler, where)
    else:
        check_repeated_lines(content, repair.sound_chars, where)


def check_filler(content: str, sound_chars: int, filler: str, where: str) -> None:
    """Everything from `sound_chars` on is filler, and the sound text does not end in filler."""
    if content[sound_chars - 1] in filler:
        raise IntegrityError(
            f"{where}: character {sound_chars - 1} ({content[sound_chars - 1]!r}) is filler, so "
            "the sound text does not end where its `sound_chars` says (pins.yaml `repair`); "
            "check it"
        )
    for offset, char in enumerate(content[sound_chars:]):
        if char not in filler:
            index = sound_chars + offset
            raise IntegrityError(
                f"{where}: character {index:,} is {char!r}, not filler "
                f"({filler_names(filler)}); the text after the first {sound_chars:,} characters "
                "is not pure filler, so cutting would lose content. A person must look at the "
                "message and set its `sound_chars` in pins.yaml `repair`"
            )


MAX_PERIOD = 20
"""The longest block of lines a `repeated_lines` cut may repeat."""


def is_copy(line: str, of: str) -> bool:
    """`line` is `of`, or a garbled copy of it: only its characters, at most two more or fewer
    (a runaway reply misspells a copy now and then)."""
    return line == of or (set(line) <= set(of) and abs(len(line) - len(of)) <= 2)


def repeat_period(lines: Sequence[str]) -> int | None:
    """The shortest block (at most MAX_PERIOD lines) that `lines` repeat from their first line to
    their last, twice or more, each line a copy of its block line (`is_copy`); None if they are no
    such repeat."""
    for period in range(1, min(MAX_PERIOD, len(lines) // 2) + 1):
        block = lines[:period]
        if any(block) and all(is_copy(line, block[i % period]) for i, line in enumerate(lines)):
            return period
    return None


def stops_short(last: str, line: str) -> bool:
    """The unterminated last line of a repeat: a copy of its line cut short, or made only of
    that line's characters (a copy garbled as the reply ran out)."""
    return line.startswith(last) or set(last) <= set(line)


def check_repeated_lines(content: str, sound_chars: int, where: str) -> None:
    """The cut starts at a line start and is one block of lines (one line or up to MAX_PERIOD)
    over and over to the end, at least twice (a copy may be garbled, `is_copy`); the last copy
    may stop short."""
    if content[sound_chars - 1] != "\n":
        raise IntegrityError(
            f"{where}: the cut at {sound_chars:,} does not start a line; set its `sound_chars` "
            "in pins.yaml `repair` to the start of the first repeated line"
        )
    *whole, last = content[sound_chars:].split("\n")
    period = repeat_period(whole)
    if period is None or not stops_short(last, whole[len(whole) % period]):
        raise IntegrityError(
            f"{where}: the text after the first {sound_chars:,} characters is not one block of "
            f"at most {MAX_PERIOD} lines repeated to the end (twice or more); cutting would lose "
            "content. A person must look at the message and set its `sound_chars` in pins.yaml "
            "`repair`"
        )


def repair_table(
    table: pa.Table, repairs: Sequence[Repair], tier: Tier, source: str
) -> tuple[pa.Table, RepairsRecord]:
    """The table with the tier's pinned messages repaired; every other value as it was."""
    position = table.column_names.index("chat")
    chat_type = table.schema.field("chat").type
    chats = table.column("chat").to_pylist()
    done = []
    for repair in (r for r in repairs if r.tier == tier):
        row = conversation_row(table, repair.conversation_id, source)
        where = f"{source}: conversation {repair.conversation_id}, message {repair.message_id}"
        message = find_message(chats[row] or [], repair.message_id, where)
        content = message.get("content")
        if not isinstance(content, str):
            raise DataError(f"{where} has no text content (found {type(content).__name__})")
        message["content"], cut = cut_message(content, repair, where)
        done.append(cut)
    try:
        column = pa.array(chats, type=chat_type)
    except (pa.ArrowException, ValueError) as exc:
        raise DataError(f"{source}: could not rebuild the chat column: {exc}") from exc
    repaired = table.set_column(position, table.schema.field("chat"), column)
    return repaired, RepairsRecord(
        tier=tier,
        messages_changed=len(done),
        chars_cut=sum(r.chars_cut for r in done),
        repairs=done,
    )


class RepairPass:
    """The repair of a release read one conversation at a time (`repair_rows` on each batch of
    rows, in the release's order, then `record`): only the rows a pin names are converted to
    Python and rebuilt, every other row passes through as read. The same cuts, records and
    errors as `repair_table` on the whole table, the records in pin order."""

    def __init__(self, repairs: Sequence[Repair], tier: Tier, source: str) -> None:
        self.tier, self.source = tier, source
        self.pins = [r for r in repairs if r.tier == tier]
        self.seen: list[str] = []
        self.done: dict[int, RepairRecord] = {}

    def repair_rows(self, rows: pa.Table) -> pa.Table:
        """`rows` (one or more conversations of the release) with their pinned messages cut."""
        ids = [str(c) for c in rows.column("conversation_id").to_pylist()]
        self.seen += ids
        wanted = [(n, r) for n, r in enumerate(self.pins) if r.conversation_id in ids]
        if not wanted:
            return rows
        position = rows.column_names.index("chat")
        chat_type = rows.schema.field("chat").type
        chats = rows.column("chat").to_pylist()
        for number, repair in wanted:
            row = ids.index(repair.conversation_id)
            where = (
                f"{self.source}: conversation {repair.conversation_id}, message {repair.message_id}"
            )
            message = find_message(chats[row] or [], repair.message_id, where)
            content = message.get("content")
            if not isinstance(content, str):
                raise DataError(f"{where} has no text content (found {type(content).__name__})")
            message["content"], self.done[number] = cut_message(content, repair, where)
        try:
            column = pa.array(chats, type=chat_type)
        except (pa.ArrowException, ValueError) as exc:
            raise DataError(f"{self.source}: could not rebuild the chat column: {exc}") from exc
        return rows.set_column(position, rows.schema.field("chat"), column)

    def record(self) -> RepairsRecord:
        """What was done, once every row has passed: DataError naming a pinned conversation the
        release does not have."""
        for number, repair in enumerate(self.pins):
            if number not in self.done and repair.conversation_id not in self.seen:
                ids = self.seen
                raise DataError(
                    f"{self.source} has no conversation {repair.conversation_id!r} (found "
                    f"{len(ids)}: {ids[:25]}); is this the run's tier?"
                )
        done = [self.done[n] for n in sorted(self.done)]
        return RepairsRecord(
            tier=self.tier,
            messages_changed=len(done),
            chars_cut=sum(r.chars_cut for r in done),
            repairs=done,
        )


PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd"}
"""How the repaired dataset is written: zstd, as the release file."""


def encode_table(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **PARQUET_OPTIONS)
    return sink.getvalue()


_SECTION = re.compile(r"^\S")
_ITEM = re.compile(r"^\s*- ")
_KEY = re.compile(r"^\s*(?:- )?(?P<key>\w+):\s*(?P<value>[^#]*?)\s*(?:#.*)?$")
_PIN_LINE = re.compile(r"^(?P<lead>\s*(?:- )?original_sha256:\s*)(?P<value>\S+)(?P<tail>.*)$")


def repin_params_text(text: str, repair: Repair, new_sha256: str) -> str:
    """pins.yaml text with this repair's `original_sha256` replaced, comments and layout kept."""
    lines = text.splitlines(keepends=True)
    items: list[list[int]] = []  # line numbers of each entry of section `repair`
    in_repair = False
    for number, line in enumerate(lines):
        if _SECTION.match(line):
            in_repair = line.startswith("repair:")
        elif in_repair and _ITEM.match(line):
            items.append([number])
        elif in_repair and items and line.strip():
            items[-1].append(number)
    wanted = {
        "tier": repair.tier,
        "conversation_id": repair.conversation_id,
        "message_id": str(repair.message_id),
    }
    for item in items:
        keys = {
            m["key"]: m["value"].strip("'\"")
            for m in (_KEY.match(lines[n].rstrip("\n")) for n in item)
            if m
        }
        if all(keys.get(k) == v for k, v in wanted.items()):
            for number in item:
                match = _PIN_LINE.match(lines[number].rstrip("\n"))
                if match:
                    ending = "\n" if lines[number].endswith("\n") else ""
                    lines[number] = f"{match['lead']}{new_sha256}{match['tail']}{ending}"
                    return "".join(lines)
    raise ParamsError(
        f"pins.yaml: no entry of section `repair` for tier {repair.tier}, conversation "
        f"{repair.conversation_id}, message {repair.message_id} with an `original_sha256:` line "
        "to re-pin"
    )


class RepairProposal(Record):
    """Where a cut could go, for a person to look at (`python -m stages.repair --propose`): never
    a pin until that person writes it into pins.yaml, with the reason."""

    tier: Tier
    conversation_id: str
    message_id: int
    chars: int
    original_sha256: str
    rest: Rest
    filler: str
    """With `rest: filler`: the characters taken as filler (given, or those of the message's last
    FILLER_SAMPLE)."""
    sound_chars: int
    """The shortest sound text that leaves only what `rest` says after it (0: nothing is sound;
    the message's length: nothing to cut)."""
    before: str
    """The last CONTEXT_CHARS characters the cut would keep."""
    after: str
    """The first CONTEXT_CHARS characters it would cut."""


FILLER_SAMPLE = 200
CONTEXT_CHARS = 400


def proposed_sound_chars(content: str, filler: str) -> int:
    """The index after the message's last character that is not filler: everything from there
    on is filler, and the sound text does not end in filler (as `check_filler` requires)."""
    stripped = content.rstrip(filler)
    return len(stripped)


def proposed_repeated_lines_cut(content: str) -> int:
    """The start of the longest run of copies of one block of lines (the shortest block, at most
    MAX_PERIOD lines; garbled copies count, `is_copy`) that ends the message, the last copy
    possibly short, as `check_repeated_lines` requires; the message's length when its end repeats
    nothing."""
    *whole, last = content.split("\n")
    best = len(whole)
    for period in range(1, min(MAX_PERIOD, len(whole) // 2) + 1):
        block = whole[len(whole) - period :]
        phase = len(whole) % period  # line i is a copy of block[(i - phase) % period]
        first = len(whole)
        while first > 0 and is_copy(whole[first - 1], block[(first - 1 - phase) % period]):
            first -= 1
        first += (phase - first) % period  # start at a whole, exact copy of the block
        while first < len(whole) and whole[first : first + period] != block:
            first += period
        run = whole[first:]
        if (
            first < best
            and repeat_period(run) == period
            and stops_short(last, run[len(run) % period])
        ):
            best = first
    return sum(len(w) + 1 for w in whole[:best]) if best < len(whole) else len(content)


def propose_repair(
    table: pa.Table,
    tier: Tier,
    conversation_id: str,
    message_id: int,
    rest: Rest,
    filler: str | None,
    source: str,
) -> RepairProposal:
    """A proposed cut of one message of the verified release, with the text around it."""
    row = conversation_row(table, conversation_id, source)
    where = f"{source}: conversation {conversation_id}, message {message_id}"
    content = find_message(table.column("chat")[row].as_py() or [], message_id, where).get(
        "content"
    )
    if not isinstance(content, str) or not content:
        raise DataError(f"{where} has no text content")
    chars = ""
    if rest == "filler":
        chars = filler if filler else "".join(sorted(set(content[-FILLER_SAMPLE:])))
        sound = proposed_sound_chars(content, chars)
    else:
        sound = proposed_repeated_lines_cut(content)
    return RepairProposal(
        tier=tier,
        conversation_id=conversation_id,
        message_id=message_id,
        chars=len(content),
        original_sha256=hashlib.sha256(content.encode("utf-8")).hexdigest(),
        rest=rest,
        filler=chars,
        sound_chars=sound,
        before=content[max(0, sound - CONTEXT_CHARS) : sound],
        after=content[sound : sound + CONTEXT_CHARS],
    )


def render_proposal(proposal: RepairProposal) -> str:
    """What `--propose` prints: the text on both sides of the cut and the pin it would make."""
    p = proposal
    what = f"filler characters {p.filler!r}" if p.rest == "filler" else "a block of lines repeated"
    pin = [
        f"    - tier: {p.tier}",
        f'      conversation_id: "{p.conversation_id}"',
        f"      message_id: {p.message_id}",
        f"      original_sha256: {p.original_sha256}",
        f"      sound_chars: {p.sound_chars}",
        f"      rest: {p.rest}",
        *([f"      filler: {json.dumps(p.filler)}"] if p.rest == "filler" else []),
        "      why: <what the message holds and why the cut goes here>",
    ]
    return "\n".join(
        [
            f"conversation {p.conversation_id}, message {p.message_id}: {p.chars:,} characters, "
            f"sha256 {p.original_sha256}",
            f"cut: {what}; proposed sound_chars {p.sound_chars:,} (cuts "
            f"{p.chars - p.sound_chars:,})",
            f"--- the last {len(p.before)} characters kept ---",
            p.before,
            f"--- the first {len(p.after)} characters cut ---",
            p.after,
            "--- nothing was written: if a person agrees, the entry of pins.yaml `repair.messages` "
            "is ---",
            *pin,
        ]
    )


def message_sha256(table: pa.Table, repair: Repair, source: str) -> str:
    """The sha256 of the pinned message in the verified release, to re-pin it (after a person has
    looked): what follows its sound text must still be what `rest` says."""
    row = conversation_row(table, repair.conversation_id, source)
    chat = table.column("chat")[row].as_py() or []
    where = f"{source}: conversation {repair.conversation_id}, message {repair.message_id}"
    content = find_message(chat, repair.message_id, where).get("content") or ""
    check_rest(content, repair, where)
    return hashlib.sha256(content.encode("utf-8")).hexdigest()
