"""The dry-run estimate of GraphRAG's model calls and tokens, and its rates taken from a run.

No model call, no server: chunk counts and prompt sizes are computed exactly (same chunker, same
prompts, same tokenizer as the run), and so is the shape of what grows with the graph: candidate
pairs within a label (quadratic in a small graph, linear once each item fills its candidate
slots, capped by `max_llm_pairs`) and the agent's tool results (a share of a small graph, capped
by the result limits in a large one). What only the model decides (how many entities and
statements a chunk yields, how often they look alike, how many steps the agent takes) comes from
the rates: params `estimate` (assumptions), or `rates_from_run` (what a finished run's files
show, `make estimate FROM=...`). The stages check this estimate against the mode's spend cap
before their first call; the report shows it beside the actual figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from clients.tokens import count_tokens
from schemas.errors import DataError
from schemas.estimate import RateOrigin
from schemas.layout import LAYOUT
from schemas.memory import ENTITY_LABELS, UPDATABLE_LABELS
from schemas.params import AgentRates, EstimateParams, IngestRates
from schemas.records import ChatSlice, Chunk, Question
from schemas.runs import MemorySizes
from schemas.traces import Trace
from systems.chunking import chunk_conversation
from systems.graphrag import prompts
from systems.graphrag.cost import ZERO, RoleEstimate
from systems.graphrag.extract import extraction_messages
from systems.graphrag.ingest import IngestSettings

EMBEDDED_TOKENS_PER_STATEMENT = 20
"""A statement's text as the embedder gets it (graphrag.retrieval hybrid), in tokens: an assumption
(one short sentence), not a rate measured from a run."""
EMBEDDED_TOKENS_PER_ENTITY = 4
"""An entity's name as the embedder gets it, in tokens (the same kind of assumption)."""


@dataclass(frozen=True)
class GraphSize:
    """The expected graph of one conversation: what the agent's searches run over."""

    chunks: int
    entities: float
    statements: float
    sessions: int = 0
    chunk_text_bytes: int = 0
    """The chunks' text (UTF-8), which the graph stores whole."""

    @property
    def items(self) -> float:
        return self.chunks + self.entities + self.statements

    def expected(self) -> dict[str, float]:
        """As `make estimate` shows it: the nodes by kind (one Conversation, a Session and a
        Document per session), their sum, and the chunks' text in MB."""
        nodes = 1 + 2 * self.sessions + self.chunks + self.entities + self.statements
        return {
            "sessions": self.sessions,
            "chunks": self.chunks,
            "entities": round(self.entities),
            "statements": round(self.statements),
            "nodes": round(nodes),
            "chunk_text_mb": round(self.chunk_text_bytes / 1e6, 2),
        }


@dataclass(frozen=True)
class IngestEstimate:
    chunks: int
    extraction: RoleEstimate
    resolution: RoleEstimate
    """Entity resolution and statement linking together (both use the resolution model)."""
    graphs: Mapping[str, GraphSize]
    """By conversation id."""

    @property
    def calls(self) -> int:
        return self.extraction.calls + self.resolution.calls

    @property
    def tokens(self) -> int:
        return self.extraction.tokens + self.resolution.tokens


def capped_poisson_mean(rate: float, cap: int) -> float:
    """E[min(cap, X)] for X ~ Poisson(rate): the candidate slots (of `cap`) an item fills when
    each earlier item is a candidate with a small chance, `rate` being chance × earlier items."""
    if cap <= 0 or rate <= 0:
        return 0.0
    term = below = math.exp(-rate)  # P(X = 0), then P(X ≤ j)
    mean = 0.0
    for j in range(cap):
        mean += 1.0 - below  # P(X > j)
        term *= rate / (j + 1)
        below += term
    return mean


def entity_pairs_in_label(mentions: float, lookalike_rate: float, per_mention: int) -> float:
    """Expected candidate pairs among the entities of one label: the j-th meets the j before it
    (resolve.candidate_pairs), so pairs grow with mentions² until each fills `per_mention`."""
    whole = int(mentions)
    pairs = sum(capped_poisson_mean(lookalike_rate * j, per_mention) for j in range(whole))
    return pairs + (mentions - whole) * capped_poisson_mean(lookalike_rate * whole, per_mention)


def statement_pairs_in_label(
    per_chunk: float, chunks: int, overlap_rate: float, per_statement: int
) -> float:
    """Expected (newer, older) pairs among the statements of one label: those of chunk c meet the
    ones of the c chunks before, never their own chunk (resolve.statement_pairs)."""
    return sum(
        per_chunk * capped_poisson_mean(overlap_rate * c * per_chunk, per_statement)
        for c in range(chunks)
    )


def extraction_prompt_tokens(chunks: Sequence[Chunk]) -> int:
    """The extraction prompts of these chunks as the estimator counts them (cl100k, messages)."""
    return sum(count_tokens(m["content"]) for c in chunks for m in extraction_messages(c))


def _pair_calls(
    sent: float, per_call: int, prompt_per_pair: float, system_tokens: int, rates: IngestRates
) -> RoleEstimate:
    """Pairs go to the model `per_call` at a time; a fraction of a call counts as a call, and a
    call counted carries at least one pair."""
    calls = math.ceil(sent / per_call) if sent > 0 else 0
    sent = max(sent, calls)
    prompt = calls * system_tokens + sent * prompt_per_pair
    return RoleEstimate(calls, round(prompt), round(sent * rates.completion_tokens_per_pair))


def estimate_ingest(
    chats: Sequence[ChatSlice], settings: IngestSettings, rates: IngestRates
) -> IngestEstimate:
    """Extraction exactly from the chunks; resolution and linking from the rates, with the
    `max_llm_pairs` cap per label, and the expected graph of each conversation."""
    extraction = ZERO
    resolution = ZERO
    chunks_total = 0
    graphs: dict[str, GraphSize] = {}
    resolve_system = count_tokens(prompts.RESOLVE.text)
    link_system = count_tokens(prompts.LINK.text)
    for chat in chats:
        chunks = chunk_conversation(chat, settings.chunk_tokens)
        n = len(chunks)
        chunks_total += n
        prompt = extraction_prompt_tokens(chunks) * rates.extraction_prompt_ratio
        extraction += RoleEstimate(n, round(prompt), round(n * rates.extraction_completion_tokens))
        entities = n * rates.entities_per_chunk
        statements = n * rates.statements_per_chunk
        text = sum(len(c.text.encode("utf-8")) for c in chunks)
        graphs[chat.conversation_id] = GraphSize(n, entities, statements, len(chat.sessions), text)

        entity_labels = rates.entity_labels_in_use
        in_label = entity_pairs_in_label(
            entities / entity_labels, rates.entity_lookalike_rate, settings.candidates_per_entity
        )
        entity_pairs = entity_labels * min(in_label, settings.max_llm_pairs)
        statement_labels = rates.statement_labels_in_use
        in_label = statement_pairs_in_label(
            rates.statements_per_chunk * rates.updatable_share / statement_labels,
            n,
            rates.statement_overlap_rate,
            settings.candidates_per_statement,
        )
        statement_pairs = statement_labels * min(in_label, settings.max_llm_pairs)
        resolution += _pair_calls(
            entity_pairs,
            settings.pairs_per_call,
            rates.tokens_per_entity_pair,
            resolve_system,
            rates,
        )
        resolution += _pair_calls(
            statement_pairs,
            settings.pairs_per_call,
            rates.tokens_per_statement_pair,
            link_system,
            rates,
        )
    return IngestEstimate(chunks_total, extraction, resolution, graphs)


# ---------------------------------------------------------------------------------------------
# Rates from a finished run
# ---------------------------------------------------------------------------------------------

GRAPHS_FILE = str(LAYOUT.ingest.graphs)
RUN_FILES = {GRAPHS_FILE: "ingest"}
"""What `rates_from_run` reads besides the harness's files (slices, traces, usage), and the stage
that writes it."""

Origins = dict[str, RateOrigin]


def _run(basis: str) -> RateOrigin:
    return RateOrigin(source="run", basis=basis)


def _kept(why: str) -> RateOrigin:
    return RateOrigin(source="params", basis=why)


def labels_in_use(counts: Mapping[str, float]) -> float:
    """1 / Σ share²: the number of equally used labels with the same chance of a same-label pair."""
    total = sum(counts.values())
    return 1 / sum((c / total) ** 2 for c in counts.values()) if total else 0.0


def fit_rate(expected: Callable[[float], float], target: float) -> float:
    """The rate in [0, 1] at which the increasing `expected` reaches `target` (bisection); 0 for
    no target, 1 where even rate 1 falls short."""
    if target <= 0:
        return 0.0
    low, high = 0.0, 1.0
    if expected(high) < target:
        return high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if expected(middle) < target else (low, middle)
    return high


def _graph_counts(graphs: MemorySizes, conversation: str) -> Mapping[str, float]:
    counts = graphs.conversations.get(f"conv{conversation}")
    if counts is None:
        raise DataError(
            f"{GRAPHS_FILE} of the run has no counts for conv{conversation}, whose slice the run "
            "holds: its ingest and slice are out of step (re-run `dvc repro ingest` there)"
        )
    return counts


def ingest_rates_from_run(
    chats: Sequence[ChatSlice],
    graphs: MemorySizes,
    usage: Mapping[str, Mapping[str, int]],
    settings: IngestSettings,
    fallback: IngestRates,
) -> tuple[IngestRates, Origins]:
    """The ingest rates a finished run shows: its chats (data/slice/chats), the counts of its
    graphs (data/ingest/graphs.json), its extraction and resolution usage (metrics/usage/) and
    its ingest settings. Counts are measured; the two pair rates are fitted (bisection) so that
    the estimator's pair shapes give the candidate pairs the run found before the
    `max_llm_pairs` cap; what the run cannot show keeps `fallback`'s value, and says why."""
    origins: Origins = {}
    chunks_of: dict[str, int] = {}
    counted = 0
    for chat in chats:
        cut = chunk_conversation(chat, settings.chunk_tokens)
        recorded = int(_graph_counts(graphs, chat.conversation_id)["chunks"])
        if recorded != len(cut):
            raise DataError(
                f"the run's {GRAPHS_FILE} has {recorded} chunks for conv{chat.conversation_id}, "
                f"but its slice cuts into {len(cut)} chunks of {settings.chunk_tokens} tokens "
                "with this code: the run was made by other code or params; take the rates from a "
                "run of this code"
            )
        chunks_of[chat.conversation_id] = recorded
        counted += extraction_prompt_tokens(cut)
    chunks = sum(chunks_of.values())
    if chunks == 0:
        raise DataError("the run's slice holds no chunk: there is nothing to take rates from")
    total = graphs.total
    values: dict[str, float] = {}

    extraction = usage.get("extraction") or {}
    calls = int(extraction.get("calls", 0))
    if calls:
        values["extraction_completion_tokens"] = extraction["completion_tokens"] / calls
        origins["extraction_completion_tokens"] = _run(
            f"{extraction['completion_tokens']:,} completion tokens over {calls:,} extraction calls"
        )
        if extraction["prompt_tokens"]:
            values["extraction_prompt_ratio"] = extraction["prompt_tokens"] / counted
            origins["extraction_prompt_ratio"] = _run(
                f"{extraction['prompt_tokens']:,} prompt tokens of {calls:,} extraction calls "
                f"({extraction['prompt_tokens'] / calls:,.0f} a call), counted {counted:,} "
                "(cl100k)"
            )
        else:
            origins["extraction_prompt_ratio"] = _kept("the run's usage counts no prompt token")
    else:
        for key in ("extraction_completion_tokens", "extraction_prompt_ratio"):
            origins[key] = _kept("the run's usage has no extraction call")

    merged = float(total.get("resolution_pairs_merged", 0))
    mentions = float(total.get("entities", 0)) + merged
    statements = float(total.get("statements", 0))
    values["entities_per_chunk"] = mentions / chunks
    origins["entities_per_chunk"] = _run(
        f"{mentions:,.0f} entities before {merged:,.0f} merges over {chunks:,} chunks"
    )
    values["statements_per_chunk"] = statements / chunks
    origins["statements_per_chunk"] = _run(f"{statements:,.0f} statements over {chunks:,} chunks")

    by_entity_label: dict[str, float] = {
        lb: float(total.get(f"entities_{lb.lower()}", 0)) for lb in ENTITY_LABELS
    }
    updatable: dict[str, float] = {
        lb: float(total.get(f"statements_{lb.lower()}", 0)) for lb in UPDATABLE_LABELS
    }
    if sum(by_entity_label.values()):
        values["entity_labels_in_use"] = min(max(labels_in_use(by_entity_label), 1.0), 5.0)
        origins["entity_labels_in_use"] = _run(f"1 / Σ share² over {_shares(by_entity_label)}")
    else:
        origins["entity_labels_in_use"] = _kept("the run's graphs hold no entity")
    if statements and sum(updatable.values()):
        values["updatable_share"] = sum(updatable.values()) / statements
        origins["updatable_share"] = _run(
            f"{sum(updatable.values()):,.0f} of {statements:,.0f} statements"
        )
        values["statement_labels_in_use"] = min(max(labels_in_use(updatable), 1.0), 4.0)
        origins["statement_labels_in_use"] = _run(f"1 / Σ share² over {_shares(updatable)}")
    else:
        for key in ("updatable_share", "statement_labels_in_use"):
            origins[key] = _kept("the run's graphs hold no updatable statement")

    shaped = fallback.model_copy(update=values)
    entity_pairs = float(total.get("resolution_pairs_considered", 0))
    statement_pairs = float(total.get("link_pairs_considered", 0))

    def expected_entity_pairs(rate: float) -> float:
        labels = shaped.entity_labels_in_use
        return sum(
            labels
            * entity_pairs_in_label(
                n * shaped.entities_per_chunk / labels, rate, settings.candidates_per_entity
            )
            for n in chunks_of.values()
        )

    def expected_statement_pairs(rate: float) -> float:
        labels = shaped.statement_labels_in_use
        per_label = shaped.statements_per_chunk * shaped.updatable_share / labels
        return sum(
            labels * statement_pairs_in_label(per_label, n, rate, settings.candidates_per_statement)
            for n in chunks_of.values()
        )

    values["entity_lookalike_rate"] = fit_rate(expected_entity_pairs, entity_pairs)
    origins["entity_lookalike_rate"] = _run(
        f"fitted to the {entity_pairs:,.0f} entity pairs the run found (before the cap)"
    )
    values["statement_overlap_rate"] = fit_rate(expected_statement_pairs, statement_pairs)
    origins["statement_overlap_rate"] = _run(
        f"fitted to the {statement_pairs:,.0f} statement pairs the run found (before the cap)"
    )
    values.update(_pair_sizes(chats, graphs, usage, settings, fallback, origins))
    return IngestRates.model_validate(fallback.model_dump() | values), origins


def _shares(counts: Mapping[str, float]) -> str:
    return ", ".join(f"{label} {count:,.0f}" for label, count in counts.items() if count)


def _pair_sizes(
    chats: Sequence[ChatSlice],
    graphs: MemorySizes,
    usage: Mapping[str, Mapping[str, int]],
    settings: IngestSettings,
    fallback: IngestRates,
    origins: Origins,
) -> dict[str, float]:
    """Tokens per pair and completion tokens per pair. The run's usage counts resolve and link
    calls together (one model role), so the two pair sizes are scaled together, keeping
    `fallback`'s ratio between them; the calls of each kind are exact (pairs go `pairs_per_call`
    to a call, per conversation), and so is each call's system prompt."""
    sizes = ("tokens_per_entity_pair", "tokens_per_statement_pair", "completion_tokens_per_pair")
    sent: dict[str, list[int]] = {"resolution": [], "link": []}
    for chat in chats:
        counts = _graph_counts(graphs, chat.conversation_id)
        sent["resolution"].append(int(counts.get("resolution_pairs_sent", 0)))
        sent["link"].append(int(counts.get("link_pairs_sent", 0)))
    entity, statement = sum(sent["resolution"]), sum(sent["link"])
    resolution = usage.get("resolution") or {}
    if not entity + statement or not resolution.get("calls"):
        for key in sizes:
            origins[key] = _kept("the run sent no pair to the resolution model")
        return {}
    per_call = settings.pairs_per_call
    system = sum(math.ceil(n / per_call) for n in sent["resolution"]) * count_tokens(
        prompts.RESOLVE.text
    ) + sum(math.ceil(n / per_call) for n in sent["link"]) * count_tokens(prompts.LINK.text)
    pair_prompt = max(0.0, resolution["prompt_tokens"] - system)
    assumed = (
        entity * fallback.tokens_per_entity_pair + statement * fallback.tokens_per_statement_pair
    )
    basis = (
        f"{resolution['prompt_tokens']:,} prompt tokens of {resolution['calls']:,} calls for "
        f"{entity:,} entity and {statement:,} statement pairs, less the system prompts "
        "(resolve and link calls are counted together: both sizes scaled by one factor)"
    )
    if assumed:
        scale = pair_prompt / assumed
        values = {
            "tokens_per_entity_pair": fallback.tokens_per_entity_pair * scale,
            "tokens_per_statement_pair": fallback.tokens_per_statement_pair * scale,
        }
    else:
        values = dict.fromkeys(sizes[:2], pair_prompt / (entity + statement))
    values["completion_tokens_per_pair"] = resolution["completion_tokens"] / (entity + statement)
    origins["tokens_per_entity_pair"] = origins["tokens_per_statement_pair"] = _run(basis)
    origins["completion_tokens_per_pair"] = _run(
        f"{resolution['completion_tokens']:,} completion tokens over {entity + statement:,} pairs"
    )
    return values


def prefetch_tokens(trace: Trace) -> int:
    """The tokens of the prefetched search's call and result in every prompt of the question
    (0 without; the turns' template tokens are left to the overhead)."""
    found = trace.prefetched
    return 0 if found is None else count_tokens(found.raw_arguments + found.result)


def agent_rates_from_run(
    traces: Sequence[Trace],
    questions: Sequence[Question],
    graph_items: Mapping[str, float],
    fallback: AgentRates,
) -> tuple[AgentRates, Origins]:
    """The agent's rates a finished run shows, from its traces (data/answer/traces.jsonl) and
    the size of each conversation's graph (`graph_items`: chunks, entities and statements).

    Call k of a question re-sends k earlier steps, so its prompt is b + k·s: with c calls the
    prompts sum to P = c·b + s·c(c-1)/2 and the largest is M = b + (c-1)·s, which gives the step
    s (a tool turn and its results) and b (system prompt, question and what every call carries)
    from each trace's `prompt_tokens` and `max_context_tokens`. A step's rows are the node ids
    its tool results returned; whether the run's graphs were small (results a share of the
    graph) or large (results at the cap) decides which of the two row rates it measures."""
    if not traces:
        raise DataError("the run's traces hold no question: there is nothing to take rates from")
    asked = {q.id: q for q in questions}
    missing = [t.question_id for t in traces if t.question_id not in asked]
    if missing:
        raise DataError(
            f"the run's traces answer {', '.join(missing[:3])}, which its questions do not hold: "
            "its answer and slice are out of step (re-run `dvc repro answer` there)"
        )
    origins: Origins = {}
    values: dict[str, float] = {}
    calls = sum(t.calls for t in traces)
    values["calls_per_question"] = max(1.0, calls / len(traces))
    origins["calls_per_question"] = _run(f"{calls:,} agent calls over {len(traces):,} questions")
    if calls:
        completion = sum(t.completion_tokens for t in traces)
        values["completion_tokens_per_call"] = completion / calls
        origins["completion_tokens_per_call"] = _run(
            f"{completion:,} completion tokens over {calls:,} calls"
        )
    else:
        origins["completion_tokens_per_call"] = _kept("the run made no agent call")

    pairs = sum(t.calls * (t.calls - 1) / 2 for t in traces)
    stepped = sum(t.calls * t.max_context_tokens - t.prompt_tokens for t in traces)
    step = max(0.0, stepped / pairs) if pairs else 0.0
    system = count_tokens(prompts.AGENT.text)
    overhead = sum(
        t.calls
        * (
            t.max_context_tokens
            - (t.calls - 1) * step
            - system
            - count_tokens(asked[t.question_id].question)
            - prefetch_tokens(t)
        )
        for t in traces
    )
    if calls:
        values["overhead_tokens_per_call"] = max(0.0, overhead / calls)
        origins["overhead_tokens_per_call"] = _run(
            f"each call's prompt less the steps it re-sends, the system prompt ({system:,}), "
            "the question and its prefetched search results, over the run's calls"
        )
    else:
        origins["overhead_tokens_per_call"] = _kept("the run made no agent call")

    turns = sum(len(t.turn_texts) for t in traces)
    rows = sum(len(c.ids) for t in traces for c in t.tool_calls)
    row_rates = ("result_rows_per_step", "result_match_share", "tokens_per_result_row")
    if not turns or not pairs:
        for key in row_rates:
            origins[key] = _kept("the agent made no tool call in the run")
    elif not rows:
        for key in row_rates:
            origins[key] = _kept(f"the agent's {turns:,} tool turns returned no node")
    else:
        per_turn = rows / turns
        items = (
            sum(
                graph_items[asked[t.question_id].conversation_id] * len(t.turn_texts)
                for t in traces
            )
            / turns
        )
        values["tokens_per_result_row"] = step / per_turn
        origins["tokens_per_result_row"] = _run(
            f"{step:,.0f} tokens a step (from the prompts) over {per_turn:,.2f} rows a step"
        )
        measured = _run(f"{rows:,} rows over {turns:,} tool turns, graphs of {items:,.0f} items")
        if items * fallback.result_match_share < fallback.result_rows_per_step:
            # a small graph: its results are a share of it, the large-graph cap not reached
            values["result_match_share"] = min(1.0, per_turn / items) if items else 1.0
            origins["result_match_share"] = measured
            values["result_rows_per_step"] = max(fallback.result_rows_per_step, per_turn)
            origins["result_rows_per_step"] = _kept(
                "the run's graphs are small: its results never reach the large-graph cap"
            )
        else:
            values["result_rows_per_step"] = per_turn
            origins["result_rows_per_step"] = measured
            share = min(1.0, per_turn / items) if items else 1.0
            values["result_match_share"] = max(fallback.result_match_share, share)
            origins["result_match_share"] = _kept(
                "the run's graphs are large: its results show the cap, not a share of the graph"
            )
    return AgentRates.model_validate(fallback.model_dump() | values), origins


def graph_items_of(graphs: MemorySizes, conversations: Sequence[str]) -> dict[str, float]:
    """Chunks, entities and statements of each conversation's graph: what the agent searched."""
    return {
        c: float(sum(_graph_counts(graphs, c)[k] for k in ("chunks", "entities", "statements")))
        for c in conversations
    }


def rates_from_run(
    files: Mapping[str, str],
    chats: Sequence[ChatSlice],
    questions: Sequence[Question],
    traces: Sequence[Trace],
    usage: Mapping[str, Mapping[str, int]],
    settings: IngestSettings,
    fallback: EstimateParams,
) -> tuple[EstimateParams, dict[str, RateOrigin]]:
    """GraphRAG's ingest and agent rates from a run's files (`RUN_FILES` in `files`, by path),
    the judge's left as `fallback` has them (the harness measures those). Origins are keyed
    `ingest.<rate>` and `agent.<rate>`."""
    graphs = MemorySizes.from_json(json.loads(files[GRAPHS_FILE]))
    ingest, ingest_origins = ingest_rates_from_run(chats, graphs, usage, settings, fallback.ingest)
    items = graph_items_of(graphs, sorted({q.conversation_id for q in questions}, key=_number))
    agent, agent_origins = agent_rates_from_run(traces, questions, items, fallback.agent)
    origins = {f"ingest.{k}": v for k, v in ingest_origins.items()}
    origins |= {f"agent.{k}": v for k, v in agent_origins.items()}
    return fallback.model_copy(update={"ingest": ingest, "agent": agent}), origins


def _number(conversation: str) -> int:
    return int(conversation) if conversation.isdigit() else 0
