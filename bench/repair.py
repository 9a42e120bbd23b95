"""repair: cut the runaway filler off the one broken message; everything else passes through.

Reads the parquet only if its bytes hash to verify-hash's receipt, then writes
`data/repair/dataset.parquet`: the same table (all columns, rows and messages), except that the
pinned message (params `repair`: conversation 4, message 97) keeps its first `sound_chars`
characters followed by a short marker saying how many characters were cut. Before cutting it
checks the message's sha256 against the pin (never cut blindly) and that everything after the
sound text is filler (spaces, `|`, `\\`, newlines). What was done goes to
`data/repair/record.json` (a fact of the pinned release, not a measure: no DVC metric).

The pin was made from the public repository's copy of the chats (`../shared/beam`), because the
release file cannot be downloaded on the machines the project was built on. If a verified
release file holds a different message, the stage says so and names the re-pin command:
`python -m stages.repair --repin` rewrites `repair.original_sha256` in pins.yaml after a
person has looked at the message and confirmed that the cut is still right.

`python -m stages.repair --propose <conversation> <message> [--filler CHARS]` prints where a cut
of another message could go (`propose_repair`), with the text around it, for a person to judge;
it never writes a pin.

The stage (stages/repair.py) reads the receipt, the parquet and pins.yaml and writes the outs;
this module checks and cuts what it read.
"""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.verify_hash import RECEIPT, Receipt, digest_bytes
from schemas.base import Record
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.layout import LAYOUT
from schemas.params import RepairParams

REPAIR_OUT = LAYOUT.repair.dataset
RECORD = LAYOUT.repair.record
FILLER_CHARS = frozenset(" |\\\n")
REQUIRED_COLUMNS = ("conversation_id", "chat")
PIN_PROVENANCE = (
    "the pin was made from the public repository's copy of the chats (../shared/beam, BEAM "
    "repository commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3), and this release file, "
    "although it passed verify-hash, differs from that copy"
)
REPIN_COMMAND = "uv run --frozen python -m stages.repair --repin"


class RepairRecord(Record):
    """What the cut did, as written to data/repair/record.json."""

    conversation_id: int
    message_id: int
    chars_before: int
    chars_kept: int
    chars_cut: int
    chars_after: int
    messages_changed: int


def check_verified(data: bytes, receipt: Receipt) -> bytes:
    """`data` (read from the receipt's file), refused unless it hashes to the receipt's sha256."""
    found = digest_bytes(data)
    if found != receipt.sha256:
        raise IntegrityError(
            f"{receipt.path} changed after it was verified: the receipt {RECEIPT} says sha256 "
            f"{receipt.sha256}, the file now hashes to {found}; run `dvc repro verify-hash`"
        )
    return data


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
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise DataError(
            f"{source} lacks column(s) {missing}; expected the BEAM release layout with "
            f"{list(required)}, found {table.column_names}"
        )
    return table


def conversation_row(table: pa.Table, conversation_id: str, source: str) -> int:
    ids = table.column("conversation_id").to_pylist()
    if conversation_id not in ids:
        raise DataError(
            f"{source} has no conversation {conversation_id!r} (found {len(ids)}: {ids[:25]}); "
            "is this the 100K split?"
        )
    return int(ids.index(conversation_id))


def find_message(chat: list[list[dict[str, Any]]], message_id: int, where: str) -> dict[str, Any]:
    for session in chat:
        for message in session:
            if message.get("id") == message_id:
                return message
    raise DataError(f"{where}: no message with id {message_id}")


def marker(chars_cut: int) -> str:
    return (
        f"\n\n[repair: {chars_cut:,} characters of runaway filler "
        "(spaces, '|', '\\' and newlines) were cut here]"
    )


def cut_filler(content: str, params: RepairParams, where: str) -> tuple[str, RepairRecord]:
    """The repaired text and what was done; refuses unless hash and filler pattern match."""
    found = hashlib.sha256(content.encode("utf-8")).hexdigest()
    if found != params.original_sha256:
        raise IntegrityError(
            f"{where} is not the message the repair was pinned on: expected sha256 "
            f"{params.original_sha256}, found {found} ({len(content):,} characters). "
            f"Refusing to cut blindly: {PIN_PROVENANCE}. After a person has looked at the "
            f"message and confirmed the cut, re-pin with `{REPIN_COMMAND}`"
        )
    check_filler(content, params.sound_chars, where)
    kept = content[: params.sound_chars]
    chars_cut = len(content) - params.sound_chars
    repaired = kept + marker(chars_cut)
    record = RepairRecord(
        conversation_id=int(params.conversation_id),
        message_id=params.message_id,
        chars_before=len(content),
        chars_kept=len(kept),
        chars_cut=chars_cut,
        chars_after=len(repaired),
        messages_changed=1,
    )
    return repaired, record


def check_filler(content: str, sound_chars: int, where: str) -> None:
    """Everything from `sound_chars` on is filler, and the sound text does not end in filler."""
    if len(content) <= sound_chars:
        raise IntegrityError(
            f"{where} has {len(content):,} characters, not more than the {sound_chars:,} "
            "sound ones: there is nothing to cut; check pins.yaml repair.sound_chars"
        )
    if content[sound_chars - 1] in FILLER_CHARS:
        raise IntegrityError(
            f"{where}: character {sound_chars - 1} ({content[sound_chars - 1]!r}) is filler, so "
            "the sound text does not end where params repair.sound_chars says (pins.yaml); check it"
        )
    for offset, char in enumerate(content[sound_chars:]):
        if char not in FILLER_CHARS:
            index = sound_chars + offset
            raise IntegrityError(
                f"{where}: character {index:,} is {char!r}, not filler (spaces, '|', '\\', "
                f"newlines); the text after the first {sound_chars:,} characters is not pure "
                "filler, so cutting would lose content. A person must look at the message and "
                "set repair.sound_chars in pins.yaml"
            )


def repair_table(
    table: pa.Table, params: RepairParams, source: str
) -> tuple[pa.Table, RepairRecord]:
    """The table with the pinned message repaired; every other value is left as it was."""
    row = conversation_row(table, params.conversation_id, source)
    where = f"{source}: conversation {params.conversation_id}, message {params.message_id}"
    position = table.column_names.index("chat")
    chat_type = table.schema.field("chat").type
    chats = table.column("chat").to_pylist()
    message = find_message(chats[row] or [], params.message_id, where)
    content = message.get("content")
    if not isinstance(content, str):
        raise DataError(f"{where} has no text content (found {type(content).__name__})")
    message["content"], record = cut_filler(content, params, where)
    try:
        column = pa.array(chats, type=chat_type)
    except (pa.ArrowException, ValueError) as exc:
        raise DataError(f"{source}: could not rebuild the chat column: {exc}") from exc
    repaired = table.set_column(position, table.schema.field("chat"), column)
    return repaired, record


def encode_table(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")  # as the release file
    return sink.getvalue()


_PIN_LINE = re.compile(r"^(?P<lead>\s+original_sha256:\s*)(?P<value>\S+)(?P<tail>.*)$")


def repin_params_text(text: str, new_sha256: str) -> str:
    """pins.yaml text with `repair.original_sha256` replaced, comments and layout kept."""
    lines = text.splitlines(keepends=True)
    in_repair = False
    for number, line in enumerate(lines):
        if line.strip() and not line[0].isspace():
            in_repair = line.startswith("repair:")
            continue
        match = _PIN_LINE.match(line.rstrip("\n"))
        if in_repair and match:
            ending = "\n" if line.endswith("\n") else ""
            lines[number] = f"{match['lead']}{new_sha256}{match['tail']}{ending}"
            return "".join(lines)
    raise ParamsError("pins.yaml: no `original_sha256:` line in section `repair` to re-pin")


class RepairProposal(Record):
    """Where a cut could go, for a person to look at (`python -m stages.repair --propose`): never
    a pin until that person writes it into pins.yaml."""

    conversation_id: str
    message_id: int
    chars: int
    original_sha256: str
    filler: str
    """The characters taken as filler (given, or those of the message's last FILLER_SAMPLE)."""
    sound_chars: int
    """The shortest sound text that leaves only filler after it (0: the whole message is)."""
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


def propose_repair(
    table: pa.Table, conversation_id: str, message_id: int, filler: str | None, source: str
) -> RepairProposal:
    """A proposed cut of one message of the verified release, with the text around it."""
    row = conversation_row(table, conversation_id, source)
    where = f"{source}: conversation {conversation_id}, message {message_id}"
    content = find_message(table.column("chat")[row].as_py() or [], message_id, where).get(
        "content"
    )
    if not isinstance(content, str) or not content:
        raise DataError(f"{where} has no text content")
    chars = filler if filler else "".join(sorted(set(content[-FILLER_SAMPLE:])))
    sound = proposed_sound_chars(content, chars)
    return RepairProposal(
        conversation_id=conversation_id,
        message_id=message_id,
        chars=len(content),
        original_sha256=hashlib.sha256(content.encode("utf-8")).hexdigest(),
        filler=chars,
        sound_chars=sound,
        before=content[max(0, sound - CONTEXT_CHARS) : sound],
        after=content[sound : sound + CONTEXT_CHARS],
    )


def render_proposal(proposal: RepairProposal) -> str:
    """What `--propose` prints: the text on both sides of the cut and the pin it would make."""
    p = proposal
    return "\n".join(
        [
            f"conversation {p.conversation_id}, message {p.message_id}: {p.chars:,} characters, "
            f"sha256 {p.original_sha256}",
            f"filler characters: {p.filler!r}; proposed sound_chars {p.sound_chars:,} (cuts "
            f"{p.chars - p.sound_chars:,})",
            f"--- the last {len(p.before)} characters kept ---",
            p.before,
            f"--- the first {len(p.after)} characters cut ---",
            p.after,
            "--- nothing was written: if a person agrees, the pin is ---",
            f'conversation_id: "{p.conversation_id}"',
            f"message_id: {p.message_id}",
            f"original_sha256: {p.original_sha256}",
            f"sound_chars: {p.sound_chars}",
        ]
    )


def message_sha256(table: pa.Table, params: RepairParams, source: str) -> str:
    """The sha256 of the pinned message in the verified release, to re-pin it (after a person has
    looked): the message must still end in filler where the pin says."""
    row = conversation_row(table, params.conversation_id, source)
    chat = table.column("chat")[row].as_py() or []
    where = f"{source}: conversation {params.conversation_id}, message {params.message_id}"
    content = find_message(chat, params.message_id, where).get("content") or ""
    check_filler(content, params.sound_chars, where)
    return hashlib.sha256(content.encode("utf-8")).hexdigest()
