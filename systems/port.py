"""The memory-system port: what every system under test implements, and what it hands back.

A system is measured in two steps, each a DVC stage (stages/ingest.py, stages/answer.py):

1. `build(chat, ...)`: read one conversation's chat (`ChatSlice`, chat messages only) and write
   its memory to one deterministic file, `data/ingest/conv<N>.jsonl` (`memory_file`): a graph
   export for graphrag, the chunks for rag, the sessions for full_context, nothing for
   no_memory. Returns the memory's counts and the model calls the build took (`BuiltMemory`).
2. `open_memory(conversation_id, file, ...)`: a context manager that makes that file ready to
   answer from (a Neo4j server with the graph imported, a BM25 index, the transcript), and
   yields a `Memory`, whose `answer(question, model)` returns one `schemas.traces.Trace`: the
   answer, the calls and tokens it took, the largest prompt, and the chat message ids its
   evidence came from (`reached_message_ids`). Questions of one conversation are answered
   concurrently: a `Memory` must allow that.

Conversations may overlap too (settings `parallel.conversations`): a system whose builds and open
memories share no state across conversations in one process (no module-level client, patched
module, process-wide lock or event loop) says so with `overlaps = True`, and the stages then
build, or open and answer, several conversations at once, each in its own worker thread. A system
that does not say so runs one conversation at a time (`overlaps`: the port never asked this of a
system before, so one written without it may hold such state).

How the answer model uses the memory is params `answer.regime`: `native` is `Memory.answer`;
`one_shot` and `agent` need a memory that can search itself (`SearchesMemory.search`, an
optional part of the port): one call with what its search found, or the agent loop with that
search as its one tool (systems/regimes.py). A system's entry says which regime its own answer
is (`SystemEntry.native_regime`: graphrag's is `agent`, every other's `one_shot`).

A system that reads gold evidence (the rubrics' cited messages, which no memory system may see)
says so (`reads_gold`: only `oracle`, the answer model's ceiling with perfect memory): the answer
stage records it, and the record, the page, the headline and `make compare` show its score as an
upper bound, never as a memory system's.

How long a question's searches took is the system's to say, as it searches: it wraps the code
that searches its memory (the query's embedding included) in `timing_search()` and marks its
`Memory` with `times_search = True`; the answer stage opens a `question_clock()` around each
`Memory.answer` and writes the sum (metrics/wall_time/answer_questions.jsonl). A system that does
not has no retrieval time (None), never a made-up 0.

Every system answers with the same model (the `agent` role) and is scored by the same judge; the
build may use other roles (`build_roles`). Before any call the stages check the system's own
estimate (`estimate_build`, `estimate_answer`) against the spend cap (`Budget.check_estimate`).
Systems are found by name through Python entry points (group `beam_memory.systems`, `ENTRY`
of each module): `systems/registry.py` builds the one params `system` names, and a system of
your own, installed beside the project, is measured without changing it (README, "Bring your own
memory system").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from clients.llm.port import ChatModel, EmbeddingModel
from schemas.base import Record
from schemas.errors import ParamsError
from schemas.estimate import ZERO, FinishedRun, Origins, RateOrigin, RoleEstimate
from schemas.params import SYSTEMS_GROUP, AgentRates, EstimateParams, Mode, NativeRegime, Params
from schemas.records import ChatSlice, Question
from schemas.roles import INGEST_ROLES, Role
from schemas.traces import Trace

ENTRY_POINTS = SYSTEMS_GROUP
"""The entry-point group every memory system registers its `SystemEntry` under."""
ANSWER_ROLE: Role = "agent"
EMBEDDING_ROLE: Role = "embedding"
"""The model role every system answers with (so systems differ only in their memory)."""

Progress = Callable[[int, int], None]
"""Called with (done, total) as a build advances (e.g. chunks extracted)."""

__all__ = [
    "ANSWER_ROLE",
    "EMBEDDING_ROLE",
    "ENTRY_POINTS",
    "ZERO",
    "BuiltMemory",
    "EmbedsQuestions",
    "FinishedRun",
    "Found",
    "Memory",
    "MemorySystem",
    "Progress",
    "RoleEstimate",
    "SearchClock",
    "SearchesMemory",
    "SystemContext",
    "SystemEntry",
    "SystemEstimate",
    "answer_rates_from_traces",
    "estimate_system",
    "memory_file",
    "overlaps",
    "question_clock",
    "reads_gold",
    "times_search",
    "timing_search",
]


def memory_file(folder: Path, conversation_id: str) -> Path:
    """Where a system keeps one conversation's memory: `<folder>/conv<N>.jsonl`."""
    return folder / f"conv{conversation_id}.jsonl"


@dataclass(frozen=True)
class BuiltMemory:
    """What building one conversation's memory gave."""

    conversation_id: str
    counts: Mapping[str, int]
    """The memory's size (data/ingest/graphs.json): chunks, entities, ... for graphrag; chunks for
    rag; sessions, messages and tokens for full_context; nothing for no_memory."""
    summary: str = ""
    """One line for the log, e.g. `4 chunks, 12 entities, ...`."""
    model_calls: int = 0
    failed_calls: int = 0
    """Calls that still failed after their retries (the stage checks `max_failed_share`)."""
    last_error: str | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)
    """Per-conversation facts for data/ingest/run.json (graphrag: its empty and failed
    extractions), keyed by what they are."""


@dataclass(frozen=True)
class SystemEstimate:
    """A system's expected model calls and tokens, before any call (rates from params
    `estimate` where a model decides; counted exactly where the prompts are known)."""

    build: Mapping[Role, RoleEstimate]
    """Per role its build calls (graphrag: extraction, resolution; the baselines: none)."""
    answer: RoleEstimate
    """The answer model's calls (role `agent`) over all the questions."""
    query_embedding: RoleEstimate = ZERO
    """The embedder's calls at answer time (the questions), for a system that embeds them."""

    @property
    def build_calls(self) -> int:
        return sum(e.calls for e in self.build.values())

    @property
    def build_tokens(self) -> int:
        return sum(e.tokens for e in self.build.values())

    def by_role(self) -> dict[Role, RoleEstimate]:
        """By model role, every role of the run present (zero where the system uses none)."""
        return {
            **{role: self.build.get(role, ZERO) for role in INGEST_ROLES},
            EMBEDDING_ROLE: self.build.get(EMBEDDING_ROLE, ZERO) + self.query_embedding,
            ANSWER_ROLE: self.answer,
        }


class Memory(Protocol):
    """One conversation's memory, open for questions (answered concurrently: thread-safe)."""

    def answer(self, question: Question, model: ChatModel) -> Trace:
        """The answer with how it was reached; a model call that failed after its retries sets
        `Trace.error` (never raised: the stage counts failures against `max_failed_share`)."""
        ...


@dataclass(frozen=True)
class Found:
    """What a memory's own search found for a query, as the answer model reads it."""

    context: str
    """The hits rendered for a prompt (rag: its chunks under their dates; graphrag: its search
    tool's JSON result); empty when nothing was found."""
    reached_ids: tuple[str, ...] = ()
    """The memory's ids of the hits (chunks, facts, memories, nodes)."""
    reached_message_ids: tuple[int, ...] = ()
    """The chat message ids the hits trace back to (for evidence recall)."""
    error: str | None = None
    """A model call of the search (an embedding) that failed after its retries."""
    test_model: bool = False


@runtime_checkable
class SearchesMemory(Protocol):
    """A memory that can search itself (an optional part of the port): `answer.regime` one_shot
    and agent answer from its search (thread-safe, as `Memory.answer`)."""

    def search(self, query: str) -> Found:
        """The memory's own search for `query`, at the system's own size (rag.top_k, ...)."""
        ...


def reads_gold(system: object) -> bool:
    """Whether a system reads gold evidence by design: its `reads_gold` attribute, else False.
    The harness asks this, never the system's name, so a system of your own that reads gold is
    flagged the same way (and one that reads it without saying so is what the leak check,
    bench/leak_check.py, is there to catch)."""
    declared = getattr(system, "reads_gold", False)
    if not isinstance(declared, bool):
        raise ParamsError(
            f"system {getattr(system, 'name', system)!r}: reads_gold must be true or false, "
            f"found {declared!r}"
        )
    return declared


def overlaps(system: object) -> bool:
    """Whether a system's conversations may be built, or opened and answered, at once in one
    process: its `overlaps` attribute, else False (one at a time, the safe reading of a system
    that never declared it)."""
    declared = getattr(system, "overlaps", False)
    if not isinstance(declared, bool):
        raise ParamsError(
            f"system {getattr(system, 'name', system)!r}: overlaps must be true or false, "
            f"found {declared!r}"
        )
    return declared


class SearchClock:
    """The wall seconds one question's answer spent searching its memory, summed over its
    searches (`timing_search`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a system may search from a thread of its own
        self._depth = 0
        self._started = 0.0
        self._seconds = 0.0
        self.searched = False
        """Whether any search was timed."""

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Adds the wall time of the code inside; searches inside one another (or overlapping,
        in threads) count the time any of them ran, once."""
        with self._lock:
            if self._depth == 0:
                self._started = time.perf_counter()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._seconds += time.perf_counter() - self._started
                    self.searched = True

    def retrieval_seconds(self, timed_by_system: bool) -> float | None:
        """The seconds searched; None when no search was timed and the system does not time its
        searches (`times_search`): a question it answered without a search then took 0."""
        return self._seconds if self.searched or timed_by_system else None


_CLOCK: ContextVar[SearchClock | None] = ContextVar("beam_search_clock", default=None)
"""The clock of the question the code running in this context answers: a context variable, so
that each of the answer stage's threads (one question at a time each) has its own."""


@contextmanager
def question_clock() -> Iterator[SearchClock]:
    """A new clock for the question answered inside (in this thread); the answer stage's."""
    clock = SearchClock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def timing_search() -> Iterator[None]:
    """A system's search of its memory for a question, timed on the question's clock (outside
    the answer stage, or in a thread the system started without copying its context, there is
    none and nothing is timed)."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    with clock.timed():
        yield


def times_search(memory: object) -> bool:
    """Whether a memory times its searches (its `times_search` attribute, else False)."""
    return getattr(memory, "times_search", False) is True


def _no_embedder() -> EmbeddingModel:
    raise ParamsError("this run has no embedder (systems/registry.py load_system makes one)")


S = TypeVar("S", bound=Record)


@dataclass(frozen=True)
class SystemContext:
    """What a system is configured from when the registry builds it."""

    params: Params
    """The run's params: the harness's sections (`ingest.chunk_tokens`, `answer`, `graph`,
    `models`, ...); its own section is `settings`."""
    mode: Mode
    rates: EstimateParams
    """The estimator's rates (params `estimate`, or rates taken from a run)."""
    answer_window: Callable[[], int | None]
    """The answer model's context window in tokens (None: unknown), asked on first call."""
    embedder: Callable[[], EmbeddingModel] = _no_embedder
    """The run's embedder (`models.embedding`), made on first call and shared by the stage's
    accounting; ParamsError when params name none."""
    settings: Record | None = None
    """The system's own params section (named after it), validated by its entry's `settings`
    model; None for a system that declares none."""

    def settings_as(self, model: type[S]) -> S:
        """The system's own settings as its model (`SystemEntry.settings`), typed."""
        if not isinstance(self.settings, model):
            raise ParamsError(
                f"a system asked for its settings as {model.__name__}, but the registry built "
                f"{type(self.settings).__name__} (its entry's `settings` must be that model)"
            )
        return self.settings


@dataclass(frozen=True)
class SystemEntry:
    """A memory system as it registers itself: its module's `ENTRY`, named in an entry point of
    the group `beam_memory.systems` (pyproject.toml)."""

    name: str
    """What params `system` says to pick it (the entry point's name too)."""
    build: Callable[[SystemContext], MemorySystem]
    native_regime: NativeRegime = "one_shot"
    """The regime its own `Memory.answer` is (params `answer.regime` native): `one_shot`, one
    call with its memory's context, or `agent`, a tool loop."""
    settings: type[Record] | None = None
    """Its own settings: a pydantic model (a `schemas.base.Record`, every field with a default
    or set in params) of the params section named after it (`rag:`, `graphrag:`), so that
    `dvc exp run -S <name>.<key>=...` sets them; None: it has none (its section, if any, must be
    empty). The registry validates the section and hands it over as `SystemContext.settings`."""


class MemorySystem(Protocol):
    """A memory system under test (systems/__init__.py: `load_system` builds one by name)."""

    @property
    def name(self) -> str: ...

    @property
    def build_roles(self) -> tuple[Role, ...]:
        """The model roles its build calls; () when it builds without a model."""
        ...

    @property
    def memory_noun(self) -> str:
        """What its memory file holds, for messages (`graph`, `chunks`, `transcript`, ...)."""
        ...

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        """Build one conversation's memory and write it to `out`, whose folder exists
        (deterministic bytes for the same chat, params and model replies). `models` holds the
        `build_roles`; `workdir` is scratch space removed after the stage (a Neo4j server's
        home)."""
        ...

    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> AbstractContextManager[Memory]:
        """The memory in `memory` (written by `build`), ready to answer; closed on leaving."""
        ...

    @property
    def run_files(self) -> Mapping[str, str]:
        """The files of a finished run its rates need beside the harness's (slices, traces,
        usage): path -> the stage that writes it; empty for a system that needs none."""
        ...

    def rates_from_run(
        self, run: FinishedRun, fallback: EstimateParams
    ) -> tuple[EstimateParams, Origins]:
        """The build and answer rates a finished run of this system shows, the rest as
        `fallback` has them; origins keyed `<section>.<rate>`."""
        ...

    def record_settings(self) -> Mapping[str, object]:
        """The settings the run's record shows for this system (label -> value)."""
        ...

    def estimate_build(self, chats: Sequence[ChatSlice]) -> Mapping[Role, RoleEstimate]:
        """Expected calls and tokens of `build` over `chats`, per role of `build_roles`."""
        ...

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """Expected calls and tokens of answering `questions` (role `agent`); with `memory_dir`
        (the built memories) it may use their real size."""
        ...


@runtime_checkable
class EstimatesMemory(Protocol):
    """A system that can say how large each conversation's memory will be before it is built
    (an optional part of the port: `make estimate` prints it where a system has it)."""

    def estimate_memory(self, chats: Sequence[ChatSlice]) -> Mapping[str, Mapping[str, float]]:
        """By conversation id, the expected size of its memory (what -> how many)."""
        ...


@runtime_checkable
class EmbedsQuestions(Protocol):
    """A system that embeds each question at answer time (an optional part of the port): its
    embedder's calls then count in the answer stage's estimate."""

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        """Expected embedder calls and tokens for `questions`."""
        ...


def estimate_system(
    system: MemorySystem,
    chats: Sequence[ChatSlice],
    questions: Sequence[Question],
    memory_dir: Path | None = None,
) -> SystemEstimate:
    """A system's whole estimate: its build and its answers (the judge is the harness's)."""
    return SystemEstimate(
        build=system.estimate_build(chats),
        answer=system.estimate_answer(chats, questions, memory_dir),
        query_embedding=(
            system.estimate_query_embedding(questions)
            if isinstance(system, EmbedsQuestions)
            else ZERO
        ),
    )


def answer_rates_from_traces(
    traces: Sequence[Trace], fallback: EstimateParams
) -> tuple[EstimateParams, Origins]:
    """A one-shot system's answer rates from its run: completion tokens per call (its prompt is
    counted exactly, so that is the only rate a run adds)."""
    calls = sum(t.calls for t in traces)
    if not calls:
        return fallback, {}
    completion = sum(t.completion_tokens for t in traces)
    agent = AgentRates.model_validate(
        fallback.agent.model_dump() | {"completion_tokens_per_call": completion / calls}
    )
    basis = f"{completion:,} completion tokens over {calls:,} calls"
    return fallback.model_copy(update={"agent": agent}), {
        "agent.completion_tokens_per_call": RateOrigin(source="run", basis=basis)
    }
