"""One pydantic model per params section: the typed view stages load their knobs through.

The params live in three files. `params.yaml` holds what a run measures (DVC tracks its keys: a
change re-runs the stages that list them, and `dvc exp show` has a column for each).
`pins.yaml` holds what the benchmark runs on (the dataset release and its hash, the repair, the
fixtures, the tokenizer, the scorer's commit and files): the stages that read a pin depend on the
whole file, one column. `settings.yaml` holds how a run runs (timeouts, retries, concurrency, the
call cache, the budget, the graph server and the estimator's rates): no stage lists them, so a
change re-runs nothing but the report, which depends on the whole file. `merge_settings` lays one
file over another; a key set in params.yaml (e.g. by `dvc exp run -S llm.concurrency=1`) wins
over settings.yaml, and a pin may be set in pins.yaml only (`shared_keys` finds a clash).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, field_validator, model_validator

from schemas.base import Record
from schemas.errors import ParamsError
from schemas.protocols import PinnedSource, ProtocolName

Sha256 = Field(pattern=r"^[0-9a-f]{64}$")
Mode = Literal["lite", "full", "all"]
"""The question sets (params `mode`), each pinned in the slice fixture: lite, a smoke test of the
pipeline; full, five conversations; all, the whole 100K split."""
MODES: tuple[Mode, ...] = get_args(Mode)


Tier = Literal["100K", "500K", "1M", "10M"]
"""BEAM's tiers: tokens per conversation (20, 35, 35 and 10 conversations); params `tier`."""
TIERS: tuple[Tier, ...] = get_args(Tier)


def budget_scope(tier: Tier, mode: Mode) -> str:
    """What a spend ledger and its cap belong to: the mode (`all`) at 100K, else the tier's
    (`500K-all`)."""
    return mode if tier == "100K" else f"{tier}-{mode}"


BUDGET_SCOPES: tuple[str, ...] = tuple(budget_scope(t, m) for t in TIERS for m in MODES)


class ReleaseFile(Record):
    """One file of a tier's release, with the size and sha256 verify-hash checks it against."""

    filename: str = Field(pattern=r"^[A-Za-z0-9_./-]+\.parquet$")
    """Path in the Hub repository, e.g. `data/100K-00000-of-00001.parquet`."""
    size_bytes: int = Field(gt=0)
    sha256: str = Sha256


class Release(Record):
    """A tier's release on the Hugging Face Hub at a pinned commit: one file, or shards read in
    the order listed (10M: two)."""

    repo_id: str
    repo_type: Literal["dataset"]
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    """A commit hash, never a moving branch."""
    files: list[ReleaseFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct_names(self) -> Release:
        names = [PurePosixPath(f.filename).name for f in self.files]
        if len(set(names)) != len(names):
            raise ValueError(f"a release's files need distinct names; found {names}")
        return self


class FetchParams(Record):
    timeout_seconds: float = Field(gt=0)


Rest = Literal["filler", "repeated_lines"]
"""What a repair cuts: only filler characters, or one line repeated to the end."""


class Repair(Record):
    """One runaway message, cut where a person chose: applied only to a message whose text hashes
    to `original_sha256`, and only when what is cut is what `rest` says."""

    tier: Tier
    conversation_id: str
    message_id: int = Field(ge=0)
    original_sha256: str = Sha256
    """sha256 of the message's original UTF-8 content: the cut is made only if it matches."""
    sound_chars: int = Field(gt=0)
    """How many leading characters of the message are sound text; the rest is cut."""
    rest: Rest
    """What the cut text must be: only the `filler` characters, or one line repeated from a line
    start to the end (the last copy may stop short)."""
    filler: str = ""
    """With `rest: filler`: the characters that count as filler."""
    why: str = Field(min_length=1)
    """What the message holds and why the cut goes there, written by the person who chose it."""

    @model_validator(mode="after")
    def _filler_only_for_filler(self) -> Repair:
        if (self.rest == "filler") != bool(self.filler):
            raise ValueError(
                "set `filler` (the characters cut) exactly when `rest` is `filler`; "
                f"found rest {self.rest!r} with filler {self.filler!r}"
            )
        return self


class RepairParams(Record):
    messages: list[Repair] = Field(default_factory=list)
    """Every pinned repair of every tier; the repair stage applies those of the run's tier."""

    @model_validator(mode="after")
    def _one_repair_per_message(self) -> RepairParams:
        keys = [(r.tier, r.conversation_id, r.message_id) for r in self.messages]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"a message is repaired at most once; pinned twice: {twice}")
        return self


Cut = Literal["full", "official"]
"""params `slice.cut`: every message of each chat, or only what the benchmark's code reads."""


class SliceParams(Record):
    fixtures: dict[Tier, str]
    """Per tier, the fixture that pins question ids, message ids and slice hashes per mode (the
    params refuse a tier without one)."""
    tokenizer: str
    conversations: list[str] = Field(default_factory=list)
    """Keep only these of the mode's conversations (ids as in the data: `[4]`, `["4", "17"]`),
    with their questions and rubrics; empty: every conversation of the mode."""
    cut: Cut = "full"
    """`full`: every message of each chat; `official`: only what the benchmark's own answer code
    reads (its `chat_trunecated.json`, pinned in the fixture as cut points), as the published
    tables were made."""
    stop_on_findings: bool = False
    """Whether a finding of the data check (bench/data_check.py) stops the stage; either way the
    findings are written beside the slices, never fixed."""

    @field_validator("conversations", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        """`-S 'slice.conversations=[4]'` gives numbers; the data's ids are text."""
        if isinstance(value, list):
            return [str(v) if type(v) is int else v for v in value]
        return value


class GraphParams(Record):
    backend: Literal["local", "docker", "uri"]
    """local: jars from `make neo4j` launched with java; docker; uri: env BEAM_NEO4J_URI etc."""
    heap_mb: int = Field(ge=128)
    """JVM heap (-Xms = -Xmx) of a local server."""
    page_cache_mb: int = Field(gt=0)
    start_timeout_seconds: float = Field(gt=0)
    stop_grace_seconds: float = Field(gt=0)
    """After SIGTERM, how long to wait before SIGKILL."""
    query_timeout_seconds: float = Field(gt=0)
    row_limit: int = Field(gt=0)
    """Most rows one read of the agent returns."""
    write_batch_size: int = Field(ge=1, le=100_000)
    docker_image: str


ROLE_MAX_TOKENS: dict[str, int] = {
    "extraction": 2048,
    "resolution": 1024,
    "agent": 1024,
    "judge": 512,
}
"""Each role's `max_tokens` when its params leave it null: room for a chunk's extraction, a batch
of pair decisions, an agent's turn and a judge's verdict, and a bound on a model that rambles."""


class ModelRef(Record):
    model: str | None
    """A litellm model name (`ollama_chat/gemma4:31b`, `openai/gpt-4o-mini`), a model the harness
    serves itself (`local/smollm2-135m-instruct`: clients/local_servers/local_model/) or
    `scripted/rules`."""
    api_base: str | None = None
    """The endpoint; one on loopback without a key gets a dummy key (a local server needs none)."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    """Name of the environment variable holding the key; null: litellm's default for the provider.
    Never the key itself."""
    structured_output: Literal["auto", "json_schema", "prompt"] = "auto"
    """How a JSON schema is asked for: auto asks litellm's `supports_response_schema` (a `local/`
    model: json_schema, which its server turns into a grammar)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens of one reply, sent with every request; null: the role's default
    (ROLE_MAX_TOKENS). A reply cut there (`finish_reason: length`) is flagged, and one that was
    to be JSON is a failure, never read from its fragment."""
    context_tokens: int | None = Field(default=None, ge=256)
    """The model's context window in tokens: sent to Ollama as `num_ctx` (its own default cuts
    longer prompts silently) and the size a `local/` model's server is started with; null:
    litellm's model info where it knows the model (Ollama: the model's own length; a `local/`
    model: its trained length), else unknown."""
    temperature: float = Field(default=0.0, ge=0, le=2)
    seed: int | None = None
    """Sent where the provider accepts a seed; null: `llm.seed`."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider options sent as they are (litellm's `extra_body`), e.g. `{top_k: 1}` for a
    llama.cpp or vLLM server; for Ollama, entries of `options` join its request options."""
    dimensions: int | None = Field(default=None, ge=1)
    """The embedding role only: the vector length asked of a provider that can shorten its
    vectors (OpenAI's text-embedding-3); null: the model's own. Part of the call cache's key."""
    batch_size: int = Field(default=32, ge=1, le=2048)
    """The embedding role only: texts per request (settings.yaml)."""


class ModelsParams(Record):
    extraction: ModelRef
    resolution: ModelRef
    embedding: ModelRef = ModelRef(model=None)
    """The embedder of the systems that retrieve by meaning (clients/llm/embeddings.py); model
    null: none (a system that needs one refuses to start)."""
    agent: ModelRef
    judge: ModelRef
    """model null: the agent's model, endpoint and provider options (its own max_tokens,
    temperature and seed still apply)."""


class SharedLimitParams(Record):
    redis_url: str = Field(pattern=r"^(rediss?://.+|local)$")
    """The Redis every process that shares the limit names (`redis://host:6379/0`), or `local`:
    the machine's, started by the first process that asks and stopped when idle
    (clients/redis_server.py)."""
    concurrency: int = Field(ge=1, le=256)
    """Requests in flight per endpoint across every process using this Redis."""


class LlmParams(Record):
    timeout_seconds: float = Field(gt=0)
    """Per attempt."""
    max_attempts: int = Field(ge=1, le=10)
    """Attempts per request (1 = no retry): on 429, 5xx, timeouts, connection errors, empty replies
    and replies that stay unusable after repair (not JSON where JSON is due, cut off, tool
    arguments that are not JSON)."""
    concurrency: int = Field(ge=1, le=64)
    """Requests in flight per endpoint (api_base) in one process, whatever its threads."""
    shared: SharedLimitParams | None = None
    """A limit per endpoint shared with other processes and machines through Redis (with the
    process's own): null, each process on its own (clients/llm/limits.py)."""
    seed: int
    """Sent where the provider accepts a seed, for every role that sets no `seed` of its own."""
    cache: bool
    cache_dir: str
    """The call cache and the budget ledger (git-ignored)."""
    stop_after_failures: int = Field(default=5, ge=1)
    """Requests in a row that exhausted their attempts on one endpoint (429/5xx/timeouts/
    connection errors) before the stage stops at once: the endpoint is down, not one request."""


class ParallelParams(Record):
    """How much of a stage runs at once beside `llm.concurrency` (settings.yaml: how a run is
    carried out; the outs are the same bytes whatever it is, so no stage lists it)."""

    conversations: int | None = Field(default=None, ge=1, le=64)
    """Conversations ingest builds and answer answers at once, each in a worker thread with its
    own Neo4j server where the system starts one; null: from the machine's cores and memory
    (stages/common.py `default_conversations`); 1: one after another. A system that does not
    declare `overlaps` (systems/port.py) runs one at a time whatever this says."""


class Cap(Record):
    calls: int = Field(ge=0)
    tokens: int = Field(ge=0)


class BudgetParams(Record):
    lite: Cap
    full: Cap
    all: Cap
    """lite, full, all: the 100K tier's modes."""
    tiers: dict[Tier, dict[Mode, Cap]] = Field(default_factory=dict)
    """The caps of the other tiers' modes (`budget.tiers.500K.all`)."""

    def find(self, tier: Tier, mode: Mode) -> Cap | None:
        """The spend cap of a tier's mode, None when settings.yaml sets none."""
        if tier == "100K":
            return {"lite": self.lite, "full": self.full, "all": self.all}[mode]
        return self.tiers.get(tier, {}).get(mode)

    def cap(self, tier: Tier, mode: Mode) -> Cap:
        """The spend cap of a tier's mode; a ParamsError when settings.yaml sets none."""
        found = self.find(tier, mode)
        if found is None:
            raise ParamsError(
                f"no budget for tier {tier} mode {mode}: set settings.yaml "
                f"`budget.tiers.{tier}.{mode}` (calls, tokens), e.g. from `make estimate "
                f"TIER={tier} MODE={mode}`"
            )
        return found

    max_over_estimate: float = Field(default=3.0, gt=1)
    """A stage stops before a call that would take its spend past this multiple of its own
    estimate (the mode caps are ceilings for any run; this catches a run off its plan)."""


class PinnedFile(Record):
    path: str = Field(min_length=1)
    """Path inside the repository, e.g. `src/prompts.py`."""
    sha256: str = Sha256


def _paper_protocol() -> list[ProtocolName]:
    return ["beam_code"]


class JudgeParams(Record):
    scorer_repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """The benchmark's public GitHub repository (owner/name) whose scorer prompts are used."""
    scorer_commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    """A commit hash, never a moving branch."""
    prompts: PinnedFile
    """The file holding `unified_llm_judge_base_prompt`."""
    compute_metrics: PinnedFile
    """The file holding `llm_equivalence` (the event-equivalence messages)."""
    base_url: str = Field(pattern=r"^https?://")
    """Raw-file host; tests point it at a loopback server."""
    timeout_seconds: float = Field(gt=0)
    max_attempts: int = Field(ge=1, le=10)
    max_equivalence_calls: int = Field(ge=1)
    """Cap on event-equivalence calls for one question; past it lines count as unmatched."""
    max_failed_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the judge calls (rubric items, event equivalences) that may still fail after their
    retries before the stage stops (exit 3). 0: any failure stops it; above 0, failures are
    reported."""
    protocols: list[ProtocolName] = Field(default_factory=_paper_protocol, min_length=1)
    """The scoring protocols that score the same answers (bench/protocols/): beam_code, the
    benchmark's own; omnimemeval and exabase, each with its judge prompt read at its pin."""
    protocol_sources: dict[ProtocolName, PinnedSource] = Field(default_factory=dict)
    """Per protocol that reads files of its own (pins.yaml): its repository, commit and files."""

    @model_validator(mode="after")
    def _protocols_are_pinned(self) -> JudgeParams:
        """Each protocol once, and each that reads files of its own pinned in pins.yaml."""
        if len(set(self.protocols)) != len(self.protocols):
            raise ValueError(f"judge.protocols lists a protocol twice: {self.protocols}")
        unpinned = [
            p for p in self.protocols if p != "beam_code" and p not in self.protocol_sources
        ]
        if unpinned:
            raise ValueError(
                f"judge.protocols {unpinned} have no source pinned (pins.yaml "
                f"`judge.protocol_sources.<protocol>`); pinned: {sorted(self.protocol_sources)}"
            )
        return self


PublishedLayout = Literal["jelly_answers", "jelly_verdicts", "pastdev_results", "amb_results"]
"""The per-question layouts of other systems' published files (../shared/published/README.md):
Jelly's answers and verdicts (JSONL), past.dev's results.jsonl (one row a question, its recall the
context) and agent-memory-benchmark's results (JSON, gzipped or not: `results[].context`)."""


class PublishedPin(Record):
    """Another system's published per-question file, pinned (pins.yaml `published`): where it is
    published and the bytes it must hash to. A file is read only when its sha256 is pinned."""

    layout: PublishedLayout
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    commit: str | None = Field(pattern=r"^[0-9a-f]{40}$")
    """None: no commit is known, so it cannot be fetched (a local copy only)."""
    path: str
    """The file's path in `repo` at `commit` (fetched there where there is network)."""
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """None: not pinned yet; the file is refused until a person pins its hash."""
    licence: str
    system: str
    """Whose results these are, for the record's label."""
    models: str
    """The models that produced them (their retrieval's and their answerer's), for the label."""


class ReplayParams(Record):
    """System `replay`: answer each question from another system's published context."""

    source: str | None = None
    """A pin of pins.yaml `published` with a context layout (pastdev_results, amb_results)."""
    file: str | None = None
    """Its local copy; None: where the fetch stage puts it (data/fetch/published/<path>)."""


class PerMode(Record):
    lite: int = Field(ge=0)
    full: int = Field(ge=0)
    all: int = Field(ge=0)


class LiteOrWhole(Record):
    """One value for lite and one for the modes that read whole conversations (full and all:
    the same conversation builds the same graph in both)."""

    lite: int = Field(ge=0)
    full: int = Field(ge=0)
    """Full and all."""

    def of(self, mode: str) -> int:
        return self.lite if mode == "lite" else self.full


class IngestParams(Record):
    """The harness's side of every build: the chunks the systems that chunk share (graphrag, rag,
    graphiti: systems/chunking.py) and the failures a build may tolerate. GraphRAG's own write
    path is its section `graphrag` (systems/graphrag/system.py)."""

    chunk_tokens: int = Field(ge=16)
    """About this many tokens per chunk (cl100k); a message is split only if it alone is larger."""
    max_failed_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the extraction, resolution and link calls that may still fail after their retries
    before the stage stops (exit 3). 0: any failure stops it; above 0, failures are reported."""


NativeRegime = Literal["one_shot", "agent"]
"""What a system's own answer is: one call with its context, or a tool loop."""
Regime = Literal["native", "one_shot", "agent"]
"""How the answer model uses a system's memory (params `answer.regime`): `native`, as the system
answers by itself (graphrag: its tool agent; the others: one call with their search's context);
`one_shot`, one call with what the system's own search found for the question, no tools;
`agent`, the agent loop with the system's own search as its one tool (graphrag: its own tools)."""


AnswerProtocol = Literal["beam", "exabase"]
"""What the answerer is given with each question: `beam`, the benchmark's own (the question
alone); `exabase`, ExaBase's answer protocol (its per-ability guidance, built from the dataset's
judge-side annotations: leaky by design, marked in the run's record, page and metrics)."""


class AnswerParams(Record):
    protocol: AnswerProtocol = "beam"
    """`exabase` hands the answerer the judge-side annotations ExaBase's `answer_prompt` gives
    its own (bench/protocols/answering.py); compare pairs only runs of the same protocol."""
    regime: Regime = "native"
    """The answer regime of every system (`Regime`): one_shot and agent need a memory that can
    search itself (systems/port.py `SearchesMemory`); full_context and no_memory answer natively
    only."""
    max_steps: int = Field(ge=1, le=30)
    """Tool-calling steps before the agent is asked for its final answer."""
    prefetch: int = Field(default=0, ge=0, le=50)
    """Search results for the question (search_memory over every kind, the kinds' rankings
    fused) put in the agent's first turn, so that a model that never calls a tool still
    answers from memory; 0: none, the agent starts from the question alone."""
    text_tool_calls: bool = True
    """Run the tool calls a model writes in its reply's text (`<tool_call>` tags, a JSON call
    object, `<function name=… arguments=…/>`) when its server returns none; false: such a
    reply is the answer."""
    max_failed_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the questions whose model calls may still fail after their retries before the
    stage stops (exit 3). 0: any failure stops it; above 0, failures are reported."""


class ReportParams(Record):
    bootstrap_samples: int = Field(ge=100)
    seed: int
    confidence: float = Field(gt=0, lt=1)


class IngestRates(Record):
    """What the extraction model is assumed to produce per chunk, and how often pairs turn up.

    Pairs form within a label, between a new item and earlier ones, so their number grows with
    the square of a small graph and only linearly once every item fills its candidate slots; the
    estimator computes that shape, these rates set its scale.
    """

    entities_per_chunk: float = Field(ge=0)
    statements_per_chunk: float = Field(ge=0)
    updatable_share: float = Field(ge=0, le=1)
    """Share of statements of a label a newer one may supersede (Fact, Measure, Preference, …)."""
    entity_labels_in_use: float = Field(ge=1, le=5)  # the entity labels of schemas/memory.py
    """How evenly entities spread over the labels, as a number of equally used labels
    (1 / Σ share²): 5 when even, near 1 when one label holds most of them."""
    statement_labels_in_use: float = Field(ge=1, le=4)  # its updatable statement labels
    """The same for the updatable statements (4 when even)."""
    entity_lookalike_rate: float = Field(ge=0, le=1)
    """Chance that an earlier entity of the same label has a name similar enough to pair with."""
    statement_overlap_rate: float = Field(ge=0, le=1)
    """Chance that a statement of an earlier chunk, same label, shares one of its entities."""
    extraction_completion_tokens: float = Field(ge=0)
    extraction_prompt_ratio: float = Field(default=1.0, gt=0)
    """The extraction model's prompt tokens over the estimator's count of the same prompts
    (cl100k, messages only): its tokenizer, chat template and response schema (1: the count)."""
    tokens_per_entity_pair: float = Field(ge=0)
    tokens_per_statement_pair: float = Field(ge=0)
    completion_tokens_per_pair: float = Field(ge=0)


class AgentRates(Record):
    """What the agent is assumed to do per question; its tool results are rows of the graph."""

    calls_per_question: float = Field(ge=1)
    """Tool-calling turns plus the final answer (the step limit caps it)."""
    result_rows_per_step: float = Field(ge=0)
    """Rows a tool result holds when the graph is large (the result limits cap it)."""
    result_match_share: float = Field(ge=0, le=1)
    """Share of a small graph's items (chunks, entities, statements) one tool result returns."""
    tokens_per_result_row: float = Field(ge=0)
    """A row of a tool result (with the tool call's share), as later calls re-send them."""
    completion_tokens_per_call: float = Field(ge=0)
    overhead_tokens_per_call: float = Field(default=0.0, ge=0)
    """Prompt tokens every agent call carries beyond the system prompt and the question as the
    estimator counts them (cl100k): the tool schemas, the chat template, the tokenizer's
    difference."""


class JudgeRates(Record):
    answer_tokens: float = Field(ge=0)
    """Length of a typical answer (it is part of every judge prompt)."""
    item_prompt_tokens: float = Field(ge=0)
    """The rubric-item judge prompt, unfilled (used when the pinned prompts are not at hand)."""
    equivalence_prompt_tokens: float = Field(ge=0)
    """The event-equivalence messages, unfilled (likewise)."""
    completion_tokens_per_call: float = Field(ge=0)
    event_calls_per_item: float = Field(ge=0)
    """Answer lines × unused items until a match: about 1 per item in order, more out of order."""
    prompt_ratio: float = Field(default=1.0, gt=0)
    """The judge model's prompt tokens over the estimator's count of the same prompts (cl100k):
    its tokenizer and chat template (1: the count)."""


class Mem0Rates(Record):
    """What Mem0's extraction is assumed to keep per add (systems/peers/mem0.py): guesses for a
    real model; the answer's estimate reads the built memories instead when they exist."""

    memories_per_add: float = Field(default=1.5, ge=0)
    tokens_per_memory: float = Field(default=25.0, ge=0)
    completion_tokens_per_add: float = Field(default=120.0, ge=0)


class EstimateParams(Record):
    """The dry-run estimator's assumptions about the models (everything else it computes)."""

    ingest: IngestRates
    agent: AgentRates
    judge: JudgeRates
    mem0: Mem0Rates = Mem0Rates()


class JudgeCheckParams(Record):
    """The check of the judge on cases whose right score is known (stages/judge_check.py)."""

    recipes: dict[Tier, str]
    """Per tier, which rubric items, kinds and seeds make the cases (no dataset text), with their
    sha256: drawn from that tier's questions."""
    cases: PerMode
    """Cases judged per mode (a pin, like the mode's questions), drawn from the recipe with every
    kind in turn (a lite run is a smoke test of minutes; full and all judge the whole recipe)."""
    min_agreement: float = Field(default=0.8, ge=0, le=1)
    """Below this overall agreement the record warns that the judge is not to be trusted."""
    max_failed_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the check's judge calls that may fail after their retries (transport, refused,
    a reply still unusable) before the stage stops (exit 3), as in every stage."""


Retriever = Literal["bm25", "dense", "hybrid"]
RETRIEVERS: tuple[Retriever, ...] = get_args(Retriever)


def merge_settings(settings: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """`settings` with `params` laid over it, section by section (a key in both: params' value)."""
    merged = dict(settings)
    for key, value in params.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[key] = merge_settings(below, value)
        else:
            merged[key] = value
    return merged


def shared_keys(one: dict[str, Any], other: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys set in both mappings (a section in both: the keys set in both of them)."""
    shared: list[str] = []
    for key, value in one.items():
        if key not in other:
            continue
        below = other[key]
        if isinstance(value, dict) and isinstance(below, dict):
            shared += shared_keys(value, below, f"{prefix}{key}.")
        else:
            shared.append(f"{prefix}{key}")
    return shared


SYSTEMS_GROUP = "beam_memory.systems"
"""The entry-point group every memory system registers its `SystemEntry` under (systems/port.py):
its names are also the top-level params sections a system may own."""


class Params(Record):
    """params.yaml over settings.yaml, with pins.yaml, typed: read once by a stage's `main()`
    (stages/common.py `read_params`) and passed down; nothing below the stages reads the files.

    The fields are the harness's sections. Any other top-level key is a memory system's own
    section, named after the system (`rag:`, `graphrag:`, a system of your own): held here as
    read (`section`), checked by name against the installed systems by the loader
    (stages/common.py) and validated by the system's own settings model when the registry builds
    it (systems/registry.py), so that a system installed beside the project has settings too."""

    model_config = ConfigDict(extra="allow", frozen=True)

    tier: Tier = "100K"
    mode: Mode
    system: str = "graphrag"
    """The memory system under test (systems/registry.py checks the name)."""
    release: dict[Tier, Release]
    fetch: FetchParams
    repair: RepairParams
    slice: SliceParams
    ingest: IngestParams
    answer: AnswerParams
    report: ReportParams
    estimate: EstimateParams
    graph: GraphParams
    judge_check: JudgeCheckParams
    models: ModelsParams
    llm: LlmParams
    parallel: ParallelParams = ParallelParams()
    budget: BudgetParams
    judge: JudgeParams
    published: dict[str, PublishedPin] = Field(default_factory=dict)
    """Other systems' published per-question files (rescore, replay), by name."""
    replay: ReplayParams = ReplayParams()

    @model_validator(mode="after")
    def _tier_is_pinned(self) -> Params:
        """A tier runs only with its release and its question set pinned (pins.yaml)."""
        if self.tier not in self.release:
            raise ValueError(
                f"tier {self.tier} has no release pinned (pins.yaml `release.{self.tier}`); "
                f"pinned: {', '.join(self.release)}"
            )
        if self.tier not in self.slice.fixtures:
            raise ValueError(
                f"tier {self.tier} has no question set pinned yet (pins.yaml "
                f"`slice.fixtures.{self.tier}`): its release is pinned, but its questions and "
                "slices must be pinned from its chats by a person first (README, Tiers); "
                f"tiers with one: {', '.join(self.slice.fixtures)}"
            )
        return self

    @model_validator(mode="after")
    def _system_sections_are_mappings(self) -> Params:
        """A system's section is a mapping of its settings (empty for a system with none)."""
        for name, value in (self.model_extra or {}).items():
            if value is not None and not isinstance(value, dict):
                raise ValueError(
                    f"{name}: a top-level key beyond the harness's sections is a memory system's "
                    f"own settings, a mapping; found {value!r}"
                )
        return self

    def system_sections(self) -> dict[str, dict[str, Any]]:
        """Every system's own section as read (top-level keys beyond the harness's)."""
        return dict(self.model_extra or {})

    def section(self, system: str) -> dict[str, Any]:
        """The system's own section as read; empty when params hold none."""
        return dict((self.model_extra or {}).get(system) or {})

    @property
    def judge_check_recipe(self) -> str:
        """The judge check's recipe of the run's tier: ParamsError when none is pinned."""
        found = self.judge_check.recipes.get(self.tier)
        if found is None:
            raise ParamsError(
                f"tier {self.tier} has no judge-check recipe: pin its path in pins.yaml "
                f"`judge_check.recipes.{self.tier}` (a new file in the fixtures folder), "
                "then draw it with `uv run --frozen python -m stages.judge_check --make-recipe`"
            )
        return found

    @property
    def tier_release(self) -> Release:
        return self.release[self.tier]

    @property
    def fixture(self) -> str:
        """The slice fixture of the run's tier."""
        return self.slice.fixtures[self.tier]

    @property
    def tier_repairs(self) -> list[Repair]:
        """The pinned repairs of the run's tier (pins.yaml `repair.messages`)."""
        return [r for r in self.repair.messages if r.tier == self.tier]
