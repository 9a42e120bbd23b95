"""The dry-run estimate of model calls and tokens, per phase, from the slices alone.

No model call, no server: chunk counts and prompt sizes are computed exactly (same chunker, same
prompts, same tokenizer as the run), and so is the shape of what grows with the graph: candidate
pairs within a label (quadratic in a small graph, linear once each item fills its candidate
slots, capped by `max_llm_pairs`) and the agent's tool results (a share of a small graph, capped
by the result limits in a large one). What only the model decides (how many entities and
statements a chunk yields, how often they look alike) comes from the rates in params: assumptions.
The stages check this estimate against the mode's spend cap before their first call; the report
shows it beside the actual figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clients.tokens import count_tokens
from schemas.judging import JudgePrompts
from schemas.params import EstimateParams, IngestRates
from schemas.records import ChatSlice, Question, Rubric
from systems.graphrag.agent import SYSTEM_PROMPT as AGENT_SYSTEM_PROMPT
from systems.graphrag.chunk import chunk_conversation
from systems.graphrag.cost import ZERO, PhaseEstimate, estimate_answer, estimate_judge
from systems.graphrag.decide import LINK_SYSTEM, RESOLVE_SYSTEM
from systems.graphrag.extract import extraction_messages
from systems.graphrag.ingest import IngestSettings


@dataclass(frozen=True)
class GraphSize:
    """The expected graph of one conversation: what the agent's searches run over."""

    chunks: int
    entities: float
    statements: float

    @property
    def items(self) -> float:
        return self.chunks + self.entities + self.statements


@dataclass(frozen=True)
class IngestEstimate:
    chunks: int
    extraction: PhaseEstimate
    resolution: PhaseEstimate
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


def _pair_calls(
    sent: float, per_call: int, prompt_per_pair: float, system_tokens: int, rates: IngestRates
) -> PhaseEstimate:
    """Pairs go to the model `per_call` at a time; a fraction of a call counts as a call, and a
    call counted carries at least one pair."""
    calls = math.ceil(sent / per_call) if sent > 0 else 0
    sent = max(sent, calls)
    prompt = calls * system_tokens + sent * prompt_per_pair
    return PhaseEstimate(calls, round(prompt), round(sent * rates.completion_tokens_per_pair))


def estimate_ingest(
    chats: Sequence[ChatSlice], settings: IngestSettings, rates: IngestRates
) -> IngestEstimate:
    """Extraction exactly from the chunks; resolution and linking from the rates, with the
    `max_llm_pairs` cap per label, and the expected graph of each conversation."""
    extraction = ZERO
    resolution = ZERO
    chunks_total = 0
    graphs: dict[str, GraphSize] = {}
    resolve_system = count_tokens(RESOLVE_SYSTEM)
    link_system = count_tokens(LINK_SYSTEM)
    for chat in chats:
        chunks = chunk_conversation(chat, settings.chunk_tokens)
        n = len(chunks)
        chunks_total += n
        prompt = sum(count_tokens(m["content"]) for c in chunks for m in extraction_messages(c))
        extraction += PhaseEstimate(n, prompt, round(n * rates.extraction_completion_tokens))
        entities = n * rates.entities_per_chunk
        statements = n * rates.statements_per_chunk
        graphs[chat.conversation_id] = GraphSize(n, entities, statements)

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


PHASES = ("extraction", "resolution", "agent", "judge")


def estimate_run(
    chats: Sequence[ChatSlice],
    questions: Sequence[Question],
    rubrics: Sequence[Rubric],
    settings: IngestSettings,
    max_steps: int,
    rates: EstimateParams,
    prompts: JudgePrompts | None = None,
) -> dict[str, PhaseEstimate]:
    """Every phase of a whole run, and the total (the judge's prompts counted when at hand)."""
    ingest = estimate_ingest(chats, settings, rates.ingest)
    graph_items = {conversation: graph.items for conversation, graph in ingest.graphs.items()}
    phases = {
        "extraction": ingest.extraction,
        "resolution": ingest.resolution,
        "agent": estimate_answer(
            questions, max_steps, rates.agent, AGENT_SYSTEM_PROMPT, graph_items
        ),
        "judge": estimate_judge(
            rubrics, {q.id: q.question for q in questions}, rates.judge, prompts
        ),
    }
    total = ZERO
    for phase in phases.values():
        total += phase
    return {**phases, "total": total}
