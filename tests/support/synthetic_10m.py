"""A synthetic release of 10M's size and layout, to measure the data stages' memory on it.

The real 10M files (two shards, 344 MB) were never read here, so `write_release` makes a stand-in
in their layout (the Hub's: tests/bench/test_slice_10m.py has the small version): ten
conversations of about `tokens_per_conversation` cl100k tokens each (10M by default), each `chat`
a struct of ten plans (`plan-1` ... `plan-10`) whose message ids restart at 0, a `plans` column
repeating every sub-chat with its plan (as the release does: the text is held twice), the other
columns of the release small, and `probing_questions` holding the questions a slice fixture names
(each citing messages of its conversation). Two shards, each one row group (as the rebuilt
mirrors are). Deterministic for a seed; written only to a temporary folder, never committed.

Text: sentences drawn from a seeded pool of made-up words (no real text, nothing to license),
enough of them that zstd compresses it about as much as chat text, not to nothing.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clients.tokens import count_tokens

PLANS = 10
SESSIONS_PER_PLAN = 20
MESSAGES_PER_SESSION = 110
"""About 22,000 messages of about 450 tokens per 10M-token conversation (500K's messages average
460 tokens)."""
POOL_SENTENCES = 20_000
SHARDS = 2
MESSAGE = pa.struct(
    [
        ("content", pa.string()),
        ("id", pa.int64()),
        ("index", pa.string()),
        ("question_type", pa.string()),
        ("role", pa.string()),
        ("time_anchor", pa.string()),
    ]
)
SESSIONS = pa.list_(pa.list_(MESSAGE))
SCHEMA = pa.schema(
    [
        ("conversation_id", pa.string()),
        (
            "conversation_seed",
            pa.struct(
                [
                    ("category", pa.string()),
                    ("id", pa.int64()),
                    ("subtopics", pa.list_(pa.string())),
                    ("theme", pa.string()),
                    ("title", pa.string()),
                ]
            ),
        ),
        ("narratives", pa.string()),
        (
            "user_profile",
            pa.struct([("user_info", pa.string()), ("user_relationships", pa.string())]),
        ),
        ("conversation_plan", pa.string()),
        ("chat", pa.struct([(f"plan-{k}", SESSIONS) for k in range(1, PLANS + 1)])),
        ("plans", pa.list_(pa.struct([("plan", pa.string()), ("chat", SESSIONS)]))),
        ("probing_questions", pa.string()),
    ]
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
)
"""A plan's month: plan k's sessions are dated in the k-th month of 2024, in order."""


@dataclass(frozen=True)
class Shape:
    """How many sessions each plan has and messages each session (a test makes them few)."""

    sessions_per_plan: int = SESSIONS_PER_PLAN
    messages_per_session: int = MESSAGES_PER_SESSION


class SentencePool:
    """Seeded made-up sentences and their cl100k token counts."""

    def __init__(self, rng: random.Random) -> None:
        syllables = [a + b for a in "bdfgklmnprstvz" for b in "aeiou"] + ["an", "er", "in", "or"]
        words = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(8000)})
        self.sentences = [
            " ".join(rng.choices(words, k=rng.randint(6, 22))).capitalize() + ". "
            for _ in range(POOL_SENTENCES)
        ]
        self.tokens = [count_tokens(s) for s in self.sentences]
        self.mean_tokens = sum(self.tokens) / len(self.tokens)


def message_text(pool: SentencePool, rng: random.Random, tokens: int) -> str:
    """About `tokens` tokens of sentences from the pool."""
    count = max(1, round(tokens / pool.mean_tokens))
    return "".join(rng.choices(pool.sentences, k=count))


def plan_chat(
    pool: SentencePool, rng: random.Random, plan: int, message_tokens: int, shape: Shape
) -> list[list[dict[str, Any]]]:
    """One plan's sessions: ids from 0, the first message of each session dated, user and
    assistant in turn, dates in order across plans."""
    sessions, local = [], 0
    for session in range(shape.sessions_per_plan):
        anchor = f"{MONTHS[plan - 1]}-{session + 1:02d}-2024"
        messages = []
        for position in range(shape.messages_per_session):
            user = position % 2 == 0
            messages.append(
                {
                    "content": message_text(pool, rng, message_tokens // (3 if user else 1)),
                    "id": local,
                    "index": None,
                    "question_type": None,
                    "role": "user" if user else "assistant",
                    "time_anchor": anchor if position == 0 else None,
                }
            )
            local += 1
        sessions.append(messages)
    return sessions


def probing_questions(rng: random.Random, questions: Mapping[str, int], total_messages: int) -> str:
    """ability -> that many questions, each citing two messages (as the release: a Python
    literal)."""
    return repr(
        {
            ability: [
                {
                    "question": f"Synthetic {ability} question {index}?",
                    "rubric": [f"LLM response should state: synthetic fact {index}"],
                    "source_chat_ids": sorted(rng.sample(range(total_messages), 2)),
                }
                for index in range(count)
            ]
            for ability, count in questions.items()
        }
    )


def conversation_row(
    pool: SentencePool,
    conversation_id: str,
    questions: Mapping[str, int],
    tokens_per_conversation: int,
    seed: int,
    shape: Shape,
) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{conversation_id}")
    messages = PLANS * shape.sessions_per_plan * shape.messages_per_session
    # users write a third of an assistant's reply: 2 messages of a turn weigh 4/3 of a reply
    message_tokens = round(tokens_per_conversation / (messages / 2 * (1 + 1 / 3)))
    plans = {k: plan_chat(pool, rng, k, message_tokens, shape) for k in range(1, PLANS + 1)}
    return {
        "conversation_id": conversation_id,
        "conversation_seed": {
            "category": "synthetic",
            "id": int(conversation_id),
            "subtopics": ["one", "two"],
            "theme": "synthetic",
            "title": f"Synthetic conversation {conversation_id}",
        },
        "narratives": message_text(pool, rng, 2_000),
        "user_profile": {"user_info": message_text(pool, rng, 300), "user_relationships": ""},
        "conversation_plan": message_text(pool, rng, 2_000),
        "chat": {f"plan-{k}": chat for k, chat in plans.items()},
        "plans": [
            {"plan": message_text(pool, rng, 1_000), "chat": chat} for chat in plans.values()
        ],
        "probing_questions": probing_questions(rng, questions, messages),
    }


def questions_per_conversation(question_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """From fixture question ids (`conv<N>:<ability>:<index>`): per conversation, per ability,
    how many questions its data must hold."""
    found: dict[str, dict[str, int]] = {}
    for question_id in question_ids:
        conv, ability, index = question_id.split(":")
        counts = found.setdefault(conv.removeprefix("conv"), {})
        counts[ability] = max(counts.get(ability, 0), int(index) + 1)
    return found


def write_release(
    folder: Path,
    questions: Mapping[str, Mapping[str, int]],
    tokens_per_conversation: int = 10_000_000,
    seed: int = 0,
    shape: Shape | None = None,
) -> list[Path]:
    """The shards `10M-0000<k>-of-00002.parquet` in `folder`: the conversations of `questions`
    (id -> ability -> count) split in order between them, each shard one row group."""
    folder.mkdir(parents=True, exist_ok=True)
    pool = SentencePool(random.Random(seed))
    shape = shape or Shape()
    ids = sorted(questions, key=int)
    per_shard = -(-len(ids) // SHARDS)
    paths = []
    for shard in range(SHARDS):
        path = folder / f"10M-{shard:05d}-of-{SHARDS:05d}.parquet"
        chunk = ids[shard * per_shard : (shard + 1) * per_shard]
        batches = [
            pa.RecordBatch.from_pylist(
                [conversation_row(pool, c, questions[c], tokens_per_conversation, seed, shape)],
                schema=SCHEMA,
            )
            for c in chunk
        ]
        table = pa.Table.from_batches(batches, schema=SCHEMA)
        pq.write_table(table, path, compression="zstd", row_group_size=len(chunk))
        del batches, table
        paths.append(path)
    return paths


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
