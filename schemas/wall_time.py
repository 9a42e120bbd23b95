"""Wall time and latency: what the ingest and answer stages write to metrics/wall_time/.

Seconds on the machine that ran the stage (a shared one, other jobs beside it), so never a
result: these files are plain outs no stage reads, kept in git with each experiment, and no column
of `dvc exp show`. `make compare` shows them per run, as that run's machine timed them.
- `metrics/wall_time/ingest.json` (`IngestWallTime`): the stage's and each build role's seconds,
  each conversation's build and their spread;
- `metrics/wall_time/answer.json` (`AnswerWallTime`): the stage's and the agent's seconds, the
  spread of the questions' answer and retrieval times;
- `metrics/wall_time/answer_questions.jsonl` (`QuestionTime`): each question's times.
"""

from __future__ import annotations

from schemas.base import Record


class Spread(Record):
    """How some wall times spread: median, 95th percentile (nearest rank: one of the values) and
    max, in seconds; all None when there are none (`n` 0)."""

    n: int
    median: float | None = None
    p95: float | None = None
    max: float | None = None


class QuestionTime(Record):
    """One question's wall time in the answer stage (a line of answer_questions.jsonl)."""

    question_id: str
    conversation_id: str
    answer_seconds: float
    """The system's whole answer (`Memory.answer`): its searches, its model calls (waiting for
    a free request slot included: questions run `llm.concurrency` at a time) and the rest."""
    retrieval_seconds: float | None
    """The part spent searching the memory, as the system timed it (systems/port.py
    `timing_search`; the query's embedding included); None for a system that times no search
    (full_context and no_memory search nothing), never a made-up 0."""


class AnswerWallTime(Record):
    """The answer stage's wall-time file (`LAYOUT.answer.wall_time`)."""

    seconds: dict[str, float]
    """`agent`: the model layer's wait on the agent's calls (none for cache hits);
    `stage_answer`: the stage process."""
    answer_seconds: Spread | None = None
    """Over the questions (None: a run made before questions were timed)."""
    retrieval_seconds: Spread | None = None
    """Over the questions whose system timed its search (None: a run made before)."""


class IngestWallTime(Record):
    """The ingest stage's wall-time file (`LAYOUT.ingest.wall_time`)."""

    seconds: dict[str, float]
    """Per build role (`cost_key`): the model layer's wait (none for cache hits); `stage_ingest`:
    the stage process."""
    build_seconds: Spread | None = None
    """Over the conversations (None: a run made before builds were timed)."""
    build_seconds_by_conversation: dict[str, float] | None = None
    """`conv<N>` -> the seconds its build took (`MemorySystem.build`, writing its file included)."""
    requests_sent: dict[str, int] | None = None
    """Per model role of the build, the requests this execution sent (retries included; cache
    hits none): 0 everywhere when every build call came from the call cache, as when a sweep of
    answer-only settings re-reads one built memory (None: a run made before they were counted).
    The calls the memory took whoever paid for them are metrics/usage/ingest.json's."""
