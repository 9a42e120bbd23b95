"""The dry-run estimate of model calls and tokens, per phase, from the slices alone.

No model call, no server: chunk counts and prompt sizes are computed exactly (same chunker, same
prompts, same tokenizer as the run); what only the model decides (how many entities and
statements a chunk yields, how many of them have look-alikes) comes from the rates in params
are assumptions. The stages check this estimate against the mode's spend cap before their first
call; the report shows it beside the actual figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from clients.tokens import count_tokens
from memory.agent import SYSTEM_PROMPT as AGENT_SYSTEM_PROMPT
from memory.chunk import chunk_conversation
from memory.cost import ZERO, PhaseEstimate, estimate_answer, estimate_judge
from memory.decide import LINK_SYSTEM, RESOLVE_SYSTEM
from memory.extract import extraction_messages
from memory.ingest import IngestSettings
from schemas.judging import JudgePrompts
from schemas.memory import ENTITY_LABELS, UPDATABLE_LABELS
from schemas.params import EstimateParams, IngestRates
from schemas.records import ChatSlice, Question, Rubric


@dataclass(frozen=True)
class IngestEstimate:
    chunks: int
    extraction: PhaseEstimate
    resolution: PhaseEstimate
    """Entity resolution and statement linking together (both use the resolution model)."""

    @property
    def calls(self) -> int:
        return self.extraction.calls + self.resolution.calls

    @property
    def tokens(self) -> int:
        return self.extraction.tokens + self.resolution.tokens


def _pair_calls(
    pairs_by_label: Sequence[float],
    cap: int,
    per_call: int,
    prompt_per_pair: float,
    system_tokens: int,
    rates: IngestRates,
) -> PhaseEstimate:
    sent = sum(min(pairs, cap) for pairs in pairs_by_label)
    calls = math.ceil(sent / per_call) if sent else 0
    prompt = calls * system_tokens + sent * prompt_per_pair
    return PhaseEstimate(calls, round(prompt), round(sent * rates.completion_tokens_per_pair))


def estimate_ingest(
    chats: Sequence[ChatSlice], settings: IngestSettings, rates: IngestRates
) -> IngestEstimate:
    """Extraction exactly from the chunks; resolution and linking from the rates, with caps."""
    extraction = ZERO
    resolution = ZERO
    chunks_total = 0
    resolve_system = count_tokens(RESOLVE_SYSTEM)
    link_system = count_tokens(LINK_SYSTEM)
    for chat in chats:
        chunks = chunk_conversation(chat, settings.chunk_tokens)
        chunks_total += len(chunks)
        prompt = sum(count_tokens(m["content"]) for c in chunks for m in extraction_messages(c))
        extraction += PhaseEstimate(
            len(chunks), prompt, round(len(chunks) * rates.extraction_completion_tokens)
        )
        entity_pairs = (
            len(chunks)
            * rates.entities_per_chunk
            * settings.candidates_per_entity
            * rates.entity_pair_rate
            / len(ENTITY_LABELS)
        )
        statement_pairs = (
            len(chunks)
            * rates.statements_per_chunk
            * rates.updatable_share
            * settings.candidates_per_statement
            * rates.statement_pair_rate
            / len(UPDATABLE_LABELS)
        )
        resolution += _pair_calls(
            [entity_pairs] * len(ENTITY_LABELS),
            settings.max_llm_pairs,
            settings.pairs_per_call,
            rates.tokens_per_entity_pair,
            resolve_system,
            rates,
        )
        resolution += _pair_calls(
            [statement_pairs] * len(UPDATABLE_LABELS),
            settings.max_llm_pairs,
            settings.pairs_per_call,
            rates.tokens_per_statement_pair,
            link_system,
            rates,
        )
    return IngestEstimate(chunks_total, extraction, resolution)


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
    phases = {
        "extraction": ingest.extraction,
        "resolution": ingest.resolution,
        "agent": estimate_answer(questions, max_steps, rates.agent, AGENT_SYSTEM_PROMPT),
        "judge": estimate_judge(
            rubrics, {q.id: q.question for q in questions}, rates.judge, prompts
        ),
    }
    total = ZERO
    for phase in phases.values():
        total += phase
    return {**phases, "total": total}
