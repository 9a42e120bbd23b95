"""mem0: Mem0's open-source memory (`mem0ai`, pinned in pyproject.toml) behind the port.

Mem0's open-source `Memory` is batched and searched as Mem0's own LoCoMo runner did it (mem0ai/mem0
`evaluation/` at b3ede5b, retired by 9315e30 for mem0ai/memory-benchmarks, which is not public
here). That runner drove Mem0's hosted platform (`MemoryClient`, `version="v2"`, custom
instructions), which cannot run offline: README's table of the peers lists every difference.
Its released code does the work:
- **Build**: `Memory.add()` once per two messages of a session in chat order (the runner's
  `batch_size=2`: a user message and the reply), with the session's date as `metadata.timestamp`,
  for one user. Each add is Mem0's own pipeline: its extraction prompt over the new messages, the
  last ten messages and the ten nearest memories, then its ADD-only writes of the facts it found.
- **Answer**: `Memory.search()` for the question, `mem0.top_k` results (the runner's 30), shown to
  the answer model as `<date>: <memory>` lines, best match first (the runner's layout), under the
  same instructions as the other one-shot systems (systems/one_shot.py), so that systems differ in
  their memory only. The runner's own answer prompt is written for LoCoMo's two speakers.
  `search` gives those lines (`Found`); `answer` is one call with them.

What differs from Mem0 run on its own, and why:
- Every model call goes through this project's model door: Mem0's `llm` and `embedding_model` are
  replaced by adapters (`DoorLlm`, `DoorEmbedder`) over the stage's chat model (role
  `extraction`) and embedder (`models.embedding`), so calls are cached, counted, capped, retried
  and failed like every other system's, and the scripted test model answers them (task
  `mem0_extract`). Mem0's own OpenAI clients are built against a discard address and never used.
  Its extraction asks for JSON mode (`response_format: json_object`), which the door sends on; a
  reply without a JSON object, or one Mem0's own parsing cannot read (`mem0_parse_problem`), is a
  failed call that fails the build, where Mem0 alone would log it and store nothing.
- Its extraction prompt says today's date ("Observation Date", "Current Date"): the adapter sets
  both to the session's date, which is the chat's "today" and keeps the call cache and the memory
  file reproducible.
- Its store is Qdrant in process memory (`QdrantClient(":memory:")`) and its history SQLite in
  memory; the memory file (`Mem0Line` per memory) holds what it stored, with ids made canonical
  (uuid5 of the conversation and the memory's number, in the order Mem0 wrote them) and its
  wall-clock `created_at`/`updated_at` set to the session's date; the answer stage loads that file
  into a fresh store. Each memory keeps the ids of the messages of the add that made it: its
  evidence.
- Telemetry is off (`MEM0_TELEMETRY=false`, set before the import; checked after it), which also
  turns off its notices, the only other network access; `MEM0_DIR` is ~/.cache/beam-memory/mem0.
- Its optional spaCy entity boosts and BM25 keyword scores (the `nlp` extra and fastembed) are
  not installed: both download models at run time. Without them Mem0 searches by vectors only.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from clients.files import read_jsonl, write_atomic
from clients.llm.port import ChatModel, ChatRequest, Completion, EmbeddingModel, Message
from clients.tokens import count_tokens
from schemas.base import Record
from schemas.errors import DataError
from schemas.estimate import RoleEstimate
from schemas.params import AgentRates, Mem0Rates
from schemas.prompt import Prompt
from schemas.records import ChatMessage, ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.one_shot import OneShotRates, answer_found, answer_request
from systems.peers.common import (
    ModelCallFailed,
    answer_estimate,
    build_estimate,
    query_embedding_estimate,
)
from systems.peers.prompts import MEM0_ANSWER
from systems.port import (
    BuiltMemory,
    Found,
    Progress,
    SystemContext,
    SystemEntry,
    memory_file,
    timing_search,
)

# isort: off
os.environ["MEM0_TELEMETRY"] = "false"  # read once, when mem0 is first imported
os.environ.setdefault("MEM0_DIR", str(Path.home() / ".cache" / "beam-memory" / "mem0"))

from mem0 import Memory
from mem0.configs.base import MemoryConfig
from mem0.configs.embeddings.base import BaseEmbedderConfig
from mem0.configs.llms.base import BaseLlmConfig
from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, PAST_MESSAGE_TRUNCATION_LIMIT
from mem0.embeddings.base import EmbeddingBase
from mem0.llms.base import LLMBase
from mem0.memory import telemetry
from mem0.memory.utils import extract_json, remove_code_blocks
from qdrant_client import QdrantClient
# isort: on

if telemetry.MEM0_TELEMETRY:
    raise RuntimeError(
        "mem0 was imported with its telemetry on before systems.peers.mem0 could turn it off: "
        "set MEM0_TELEMETRY=false in the environment"
    )

MEM0_VERSION = "2.2.1"
EXTRACT_TASK = "mem0_extract"
"""The task of Mem0's extraction calls (the test model's rule: systems/peers/scripted_rules.py)."""
MESSAGES_PER_ADD = 2
USER_ID = "user"
COLLECTION = "mem0"
NAMESPACE = uuid.UUID("6f1c1f0e-6b7a-4d0e-9a35-0d1f4f3c0b2a")
"""The namespace of the memories' canonical ids (uuid5 of `<conversation>/<number>`)."""
UNUSED_ENDPOINT = "http://127.0.0.1:9/v1"
"""Where Mem0's own OpenAI clients point: the discard port, never called (the door is)."""
EXTRACT = Prompt(name="mem0-extract", text=ADDITIVE_EXTRACTION_PROMPT)
"""Mem0's own extraction prompt (mem0ai's `ADDITIVE_EXTRACTION_PROMPT`, the template its
extraction calls fill): their version is its text's."""
_DATES = re.compile(r"(## (?:Observation|Current) Date\n)\d{4}-\d{2}-\d{2}")
PAST_MESSAGES = 10
"""The messages before an add that Mem0 shows its extraction call (`get_last_messages`)."""
EXISTING_MEMORIES = 10
"""The nearest memories Mem0 shows its extraction call (its search's `top_k` in `add`)."""


@dataclass(frozen=True)
class Add:
    """One `Memory.add()`: two messages of a session, in chat order."""

    session: int
    date_iso: str
    messages: tuple[ChatMessage, ...]

    def as_mem0(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages]


def adds_of(chat: ChatSlice) -> list[Add]:
    """The chat as Mem0's runner adds it: each session's messages two at a time."""
    return [
        Add(session.number, session.date_iso, tuple(session.messages[i : i + MESSAGES_PER_ADD]))
        for session in chat.sessions
        for i in range(0, len(session.messages), MESSAGES_PER_ADD)
    ]


def dated_prompt(messages: Sequence[Mapping[str, Any]], date_iso: str) -> tuple[Message, ...]:
    """Mem0's messages for a call, its dates ("Observation Date", "Current Date") set to the
    session's."""
    converted = []
    for message in messages:
        content = _DATES.sub(rf"\g<1>{date_iso}", str(message.get("content") or ""))
        role = message.get("role")
        converted.append(Message.system(content) if role == "system" else Message.user(content))
    return tuple(converted)


def extraction_request(
    messages: Sequence[Mapping[str, Any]], date_iso: str, *, json_object: bool = True
) -> ChatRequest:
    """Mem0's extraction call through the door, with the JSON mode Mem0 asks for (its
    `response_format={"type": "json_object"}`): a reply without a JSON object is unusable there,
    retried, then a failed call."""
    return ChatRequest(
        messages=dated_prompt(messages, date_iso),
        task=EXTRACT_TASK,
        prompt_version=EXTRACT.version,
        json_object=json_object,
    )


def mem0_parse_problem(reply: str) -> str | None:
    """Why Mem0's own reading of an extraction reply would fail, or None where it reads it
    (mem0ai 2.2.1, `Memory._add_to_vector_store`: its code fences removed, `json.loads`, else
    `extract_json` then `json.loads`, then `.get("memory", [])`). Mem0 logs such a failure and goes
    on as if the model had found nothing, so the adapter makes it a failed call instead. The door
    already refused a reply with no JSON object; this catches one it repaired (a trailing comma,
    single quotes) that Mem0's strict `json.loads` does not take."""
    try:
        text = remove_code_blocks(reply)
        if not text or not text.strip():
            return None  # Mem0: nothing extracted, a reply it reads
        try:
            value = json.loads(text, strict=False)
        except json.JSONDecodeError:
            value = json.loads(extract_json(text), strict=False)
        value.get("memory", [])
    except Exception as exc:  # what Mem0 catches there, whatever it is
        return (
            f"Mem0 cannot read the extraction reply ({type(exc).__name__}: {exc}): {reply[:200]!r}"
        )
    return None


class DoorLlm(LLMBase):
    """Mem0's LLM, served by the stage's chat model (role `extraction`)."""

    def __init__(self, model: ChatModel) -> None:
        super().__init__(BaseLlmConfig(model=f"beam-memory/{model.role}"))
        self.model = model
        self.date_iso = ""
        """The session date of the add under way (Mem0's "today")."""
        self.completions: list[Completion] = []
        self.unreadable: list[str] = []
        """Replies the door passed that Mem0's own parsing would drop (`mem0_parse_problem`)."""

    def generate_response(
        self,
        messages: list[dict[str, Any]],
        response_format: Any = None,
        tools: Any = None,
        tool_choice: str = "auto",
        **kwargs: Any,
    ) -> str:
        asked = (
            isinstance(response_format, Mapping) and response_format.get("type") == "json_object"
        )
        completion = self.model.complete(
            extraction_request(messages, self.date_iso, json_object=asked)
        )
        self.completions.append(completion)
        if not completion.ok:
            raise ModelCallFailed(completion.error)
        text = completion.text or ""
        problem = mem0_parse_problem(text)
        if problem is not None:
            self.unreadable.append(problem)
            raise ModelCallFailed(problem)
        return text

    @property
    def failed(self) -> list[str]:
        """Why each failed call failed: the door's failures, and replies Mem0 cannot read."""
        return [c.error or "failed" for c in self.completions if not c.ok] + self.unreadable


class DoorEmbedder(EmbeddingBase):
    """Mem0's embedder, served by the run's embedder (`models.embedding`)."""

    def __init__(self, embedder: EmbeddingModel) -> None:
        super().__init__(BaseEmbedderConfig(model=embedder.model))
        self.embedder = embedder
        self.requests = 0
        self.errors: list[str] = []
        self.test_model = embedder.test_model

    def vectors(self, texts: Sequence[str], action: str | None) -> list[list[float]]:
        found = self.embedder.embed(list(texts), task="query" if action == "search" else "memory")
        self.requests += found.usage_requests
        if not found.ok:
            self.errors.append(found.error or "the embedding failed")
            raise ModelCallFailed(found.error)
        return [list(v) for v in found.vectors]

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.vectors([text], memory_action)[0]

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return self.vectors(texts, memory_action) if texts else []


class Mem0Line(Record):
    """A line of mem0's memory file: one memory as Mem0 stored it, canonical."""

    id: str
    """`m<number>`, in the order Mem0 wrote them."""
    point: str
    """Its id in Mem0's store: uuid5 of `<conversation>/<number>`."""
    text: str
    session: int
    date_iso: str
    message_ids: tuple[int, ...]
    """The messages of the add that made it (its evidence)."""
    payload: dict[str, Any]
    """Mem0's payload, `created_at` and `updated_at` set to the session's date."""
    vector: tuple[float, ...]


def point_id(conversation_id: str, number: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{conversation_id}/{number}"))


def canonical_payload(payload: Mapping[str, Any], date_iso: str) -> dict[str, Any]:
    """Mem0's payload without wall-clock times: both set to the session's midnight (UTC)."""
    when = f"{date_iso}T00:00:00+00:00"
    return {**payload, "created_at": when, "updated_at": when}


@dataclass
class CanonicalStore:
    """Mem0's vector store, with canonical ids and dates on what Mem0 inserts, and a copy kept
    for the memory file. Everything else is Mem0's store as it is."""

    store: Any
    conversation_id: str
    add: Add | None = None
    lines: list[Mem0Line] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def insert(
        self, vectors: list[Any], payloads: list[Any] | None = None, ids: Any = None
    ) -> None:
        if self.add is None:
            raise RuntimeError("Mem0 inserted a memory outside an add")
        add, start = self.add, len(self.lines)
        new = [
            Mem0Line(
                id=f"m{start + i}",
                point=point_id(self.conversation_id, start + i),
                text=str(payload.get("data", "")),
                session=add.session,
                date_iso=add.date_iso,
                message_ids=tuple(m.id for m in add.messages),
                payload=canonical_payload(payload, add.date_iso),
                vector=tuple(float(x) for x in vector),
            )
            for i, (vector, payload) in enumerate(zip(vectors, payloads or [], strict=True))
        ]
        self.store.insert(
            vectors=vectors, payloads=[n.payload for n in new], ids=[n.point for n in new]
        )
        self.lines.extend(new)


def new_memory(dimensions: int, embedder: DoorEmbedder, llm: DoorLlm | None) -> Any:
    """A Mem0 `Memory` in process memory whose model calls go through the door."""
    config = MemoryConfig.model_validate(
        {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": COLLECTION,
                    "embedding_model_dims": dimensions,
                    "client": QdrantClient(location=":memory:"),
                    "path": ":memory:",
                },
            },
            "llm": {
                "provider": "openai",
                "config": {
                    "model": "unused",
                    "api_key": "unused",
                    "openai_base_url": UNUSED_ENDPOINT,
                },
            },
            "embedder": {
                "provider": "openai",
                "config": {"api_key": "unused", "openai_base_url": UNUSED_ENDPOINT},
            },
            "history_db_path": ":memory:",
        }
    )
    with warnings.catch_warnings():  # local Qdrant ignores the payload indexes Mem0 asks for
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        memory = Memory(config)
    memory.embedding_model = embedder
    if llm is not None:
        memory.llm = llm
    return memory


def shown_past(message: ChatMessage) -> str:
    """A past message as Mem0's extraction prompt shows it (cut at its limit)."""
    content = message.content
    if len(content) > PAST_MESSAGE_TRUNCATION_LIMIT:
        content = content[:PAST_MESSAGE_TRUNCATION_LIMIT] + "..."
    return f"{message.role}: {content}"


def render_memories(lines: Sequence[Mem0Line]) -> str:
    """The memories as Mem0's runner shows them: `<date>: <memory>`, best match first."""
    return "\n".join(f"{line.date_iso}: {line.text}" for line in lines)


def mem0_request(question: Question, context: str) -> ChatRequest:
    return answer_request(question, context, instructions=MEM0_ANSWER)


@dataclass
class Mem0Answers:
    """One conversation's Mem0 memory, open for questions (searches one at a time)."""

    memory: Any
    embedder: DoorEmbedder
    lines: Mapping[str, Mem0Line]
    """By point id."""
    top_k: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    times_search: ClassVar[bool] = True
    """Its search is timed (`timing_search`, systems/port.py)."""

    def find(self, query: str) -> list[Mem0Line]:
        """Mem0's `top_k` best memories for `query`, best first (timed once it has the lock:
        waiting for another question's search is in the answer's time, not the retrieval's)."""
        if not self.lines:
            return []
        with self.lock, timing_search():
            found = self.memory.search(query, filters={"user_id": USER_ID}, top_k=self.top_k)
        return [self.lines[str(hit["id"])] for hit in found["results"]]

    def search(self, query: str) -> Found:
        """The memories as the answer prompt shows them; reached: their ids and messages."""
        test_model = self.embedder.test_model
        try:
            lines = self.find(query)
        except ModelCallFailed as exc:
            return Found("", error=str(exc), test_model=test_model)
        return Found(
            render_memories(lines),
            reached_ids=tuple(line.id for line in lines),
            reached_message_ids=tuple(dict.fromkeys(m for x in lines for m in x.message_ids)),
            test_model=test_model,
        )

    def answer(self, question: Question, model: ChatModel) -> Trace:
        found = self.search(question.question)
        return answer_found(question, model, found, mem0_request(question, found.context))


@dataclass(frozen=True)
class Mem0(OneShotRates):
    """Mem0 (its released code) behind the port: one add per two messages, search at answer."""

    top_k: int
    agent_rates: AgentRates
    embedder: Any
    """() -> EmbeddingModel: the run's embedder, made on first call."""
    embedding_model: str | None = None
    embedding_batch: int = 32
    rates: Mem0Rates = field(default_factory=Mem0Rates)
    """Settings `estimate.mem0`."""
    name: str = "mem0"
    overlaps: ClassVar[bool] = False
    """One conversation at a time (systems/port.py): Mem0's `Memory` is its library's, whose
    process-wide state (its config, telemetry and clients) this adapter does not vouch for."""
    build_roles: tuple[Role, ...] = ("extraction",)
    memory_noun: str = "memories"

    def record_settings(self) -> Mapping[str, object]:
        return {
            "Mem0 (mem0ai)": MEM0_VERSION,
            "messages per add": MESSAGES_PER_ADD,
            "memories in the prompt": self.top_k,
            "embedder": self.embedding_model,
        }

    def build(
        self,
        chat: ChatSlice,
        models: Mapping[Role, ChatModel],
        out: Path,
        workdir: Path,
        progress: Progress | None = None,
    ) -> BuiltMemory:
        adds = adds_of(chat)
        embedder = DoorEmbedder(self.embedder())
        llm = DoorLlm(models["extraction"])
        try:
            dimensions = len(embedder.embed("dimensions", "search"))
            memory = new_memory(dimensions, embedder, llm)
            store = CanonicalStore(memory.vector_store, chat.conversation_id)
            memory.vector_store = store
            for done, add in enumerate(adds, start=1):
                store.add, llm.date_iso = add, add.date_iso
                memory.add(add.as_mem0(), user_id=USER_ID, metadata={"timestamp": add.date_iso})
                if embedder.errors:  # Mem0 drops a memory whose embedding failed: we stop
                    raise ModelCallFailed(embedder.errors[-1])
                if progress is not None:
                    progress(done, len(adds))
        except Exception as exc:
            failed = len(llm.failed) + len(embedder.errors)
            if not failed:
                raise
            return BuiltMemory(
                chat.conversation_id,
                {"adds": len(adds)},
                summary=f"Mem0 stopped at a failed model call: {exc}",
                model_calls=len(llm.completions) + embedder.requests,
                failed_calls=failed,
                last_error=str(exc),
            )
        kept = memory.vector_store.list(filters={"user_id": USER_ID}, top_k=len(store.lines) + 1)
        stored = len(kept[0]) if kept and isinstance(kept[0], list) else len(kept)
        if stored != len(store.lines):
            raise DataError(
                f"Mem0 holds {stored} memories of conversation {chat.conversation_id} but wrote "
                f"{len(store.lines)}: this adapter expects mem0ai {MEM0_VERSION}'s add-only writes"
            )
        write_atomic(out, "".join(line.model_dump_json() + "\n" for line in store.lines))
        counts = {"adds": len(adds), "memories": len(store.lines)}
        return BuiltMemory(
            chat.conversation_id,
            counts,
            summary=f"{counts['memories']} memories from {counts['adds']} adds",
            model_calls=len(llm.completions) + embedder.requests,
        )

    @contextmanager
    def open_memory(
        self, conversation_id: str, memory: Path, workdir: Path
    ) -> Iterator[Mem0Answers]:
        lines = read_jsonl(memory, Mem0Line)
        embedder = DoorEmbedder(self.embedder())
        store = new_memory(len(lines[0].vector), embedder, None) if lines else None
        if store is not None:
            store.vector_store.insert(
                vectors=[list(line.vector) for line in lines],
                payloads=[line.payload for line in lines],
                ids=[line.point for line in lines],
            )
        try:
            yield Mem0Answers(store, embedder, {line.point: line for line in lines}, self.top_k)
        finally:
            if store is not None:
                store.close()

    def estimate_build(self, chats: Sequence[ChatSlice]) -> dict[Role, RoleEstimate]:
        """Per add one extraction call (Mem0's prompt over the new messages, the last ten and up
        to ten memories) and two embedding requests (the new messages, the memories found); one
        request per conversation for the vectors' length."""
        system = count_tokens(ADDITIVE_EXTRACTION_PROMPT)
        rates = self.rates
        calls = prompt = embed_calls = embed_tokens = 0
        for chat in chats:
            adds = adds_of(chat)
            history: list[int] = []
            embed_calls += 1
            for number, add in enumerate(adds):
                new = sum(count_tokens(m.content) for m in add.messages)
                memories = min(EXISTING_MEMORIES, number * rates.memories_per_add)
                prompt += system + new + sum(history[-PAST_MESSAGES:])
                prompt += round(memories * rates.tokens_per_memory)
                history += [count_tokens(shown_past(m)) for m in add.messages]
                embed_calls += 2
                embed_tokens += new + round(rates.memories_per_add * rates.tokens_per_memory)
            calls += len(adds)
        completion = round(calls * rates.completion_tokens_per_add)
        return build_estimate(RoleEstimate(calls, prompt, completion), embed_calls, embed_tokens)

    def estimate_query_embedding(self, questions: Sequence[Question]) -> RoleEstimate:
        return query_embedding_estimate(questions)

    def estimate_answer(
        self,
        chats: Sequence[ChatSlice],
        questions: Sequence[Question],
        memory_dir: Path | None = None,
    ) -> RoleEstimate:
        """One call per question; its prompt the instructions, the question and `top_k`
        memories of the conversation's average size: from the built memories (`memory_dir`),
        else from `estimate.mem0`."""
        chats_by_id = {c.conversation_id: c for c in chats}
        shown_tokens = {
            cid: self.memory_tokens(cid, chats_by_id.get(cid), memory_dir)
            for cid in {q.conversation_id for q in questions}
        }
        return answer_estimate(
            questions,
            lambda question: mem0_request(question, ""),
            shown_tokens,
            self.agent_rates.completion_tokens_per_call,
        )

    def memory_tokens(
        self, conversation_id: str, chat: ChatSlice | None, memory_dir: Path | None
    ) -> float:
        """The tokens of the `top_k` memory lines a question's prompt shows, on average: from
        the built memories where they are, else from the chat and `estimate.mem0`."""
        built = memory_file(memory_dir, conversation_id) if memory_dir is not None else None
        if built is not None and built.is_file():
            lines = read_jsonl(built, Mem0Line)
            rendered = [count_tokens(render_memories([line])) + 1 for line in lines]
            return min(self.top_k, len(lines)) * (sum(rendered) / len(rendered) if lines else 0)
        if chat is None:
            return 0.0
        kept = len(adds_of(chat)) * self.rates.memories_per_add
        per_line = self.rates.tokens_per_memory + count_tokens("2024-01-01: ")
        return min(self.top_k, kept) * per_line


class Mem0Params(Record):
    """The `mem0` peer (systems/peers/mem0.py): Mem0's released code behind the port."""

    top_k: int = Field(default=30, ge=1, le=100)
    """Memories its search puts in the answer prompt (Mem0's own evaluation runner: 30)."""


def build_system(context: SystemContext) -> Mem0:
    """Mem0: params `mem0` and `models.embedding` (its build also calls `models.extraction`)."""
    params = context.params
    return Mem0(
        top_k=context.settings_as(Mem0Params).top_k,
        agent_rates=context.rates.agent,
        embedder=context.embedder,
        embedding_model=params.models.embedding.model,
        embedding_batch=params.models.embedding.batch_size,
        rates=context.rates.mem0,
    )


ENTRY = SystemEntry(name="mem0", build=build_system, settings=Mem0Params)
"""The entry point `mem0` (pyproject.toml)."""
