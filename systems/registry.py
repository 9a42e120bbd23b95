"""The systems under test by name: params `system` picks one, its params sections configure it.

    system = load_system(params)                      # the run's system, mode and its sections
    system = load_system(params, answer_model=agent)  # full_context: the agent's context window

| name         | memory file (data/ingest/conv<N>.jsonl) | params                              |
|--------------|-----------------------------------------|-------------------------------------|
| graphrag     | the knowledge graph's export            | ingest, answer, graph               |
| full_context | the sessions                            | full_context                        |
| rag          | the chunks                              | rag, ingest.chunk_tokens            |
| no_memory    | empty                                   | -                                   |

Each reads `estimate` (the answer model's rates) for its estimate. The systems are imported when
picked, so a baseline never imports the Neo4j driver.
"""

from __future__ import annotations

from typing import cast

from clients.llm.client import LlmClient, open_model
from schemas.errors import ParamsError
from schemas.params import EstimateParams, Mode, Params
from systems.port import ANSWER_ROLE, SYSTEM_NAMES, MemorySystem, SystemName


def system_name(params: Params) -> SystemName:
    """The run's `system`, checked against the systems there are."""
    if params.system not in SYSTEM_NAMES:
        raise ParamsError(
            f"params.yaml: system must be one of {', '.join(SYSTEM_NAMES)}, found {params.system!r}"
        )
    return cast(SystemName, params.system)


def load_system(
    params: Params,
    name: SystemName | None = None,
    *,
    answer_model: LlmClient | None = None,
    mode: Mode | None = None,
    rates: EstimateParams | None = None,
) -> MemorySystem:
    """The system `name` (default: params `system`) configured from the run's params.
    `answer_model` gives full_context the context window when `full_context.context_tokens` is
    null (default: the agent's model as params name it, asked without a call). `mode` and `rates`
    replace params' `mode` and `estimate` (the estimate of another mode, or with rates taken from
    a run: stages/estimate.py)."""
    name = name or system_name(params)
    rates = rates or params.estimate
    if name == "graphrag":
        from systems.graphrag.system import GraphRag, ingest_settings

        return GraphRag(
            settings=ingest_settings(params.ingest, mode or params.mode),
            graph=params.graph,
            max_steps=params.answer.max_steps,
            result_limit=params.answer.result_limit,
            text_tool_calls=params.answer.text_tool_calls,
            ingest_rates=rates.ingest,
            agent_rates=rates.agent,
        )
    if name == "rag":
        from systems.rag import Rag

        return Rag(
            chunk_tokens=params.ingest.chunk_tokens,
            top_k=params.rag.top_k,
            agent_rates=rates.agent,
        )
    if name == "full_context":
        from systems.full_context import FullContext

        model = answer_model

        def model_window() -> int | None:
            nonlocal model
            if model is None:  # the estimate: the agent's model as params name it (no call)
                model = open_model(ANSWER_ROLE, params)
            return model.context_window()

        return FullContext(
            context_tokens=params.full_context.context_tokens,
            reply_tokens=params.full_context.reply_tokens,
            agent_rates=rates.agent,
            model_window=model_window,
        )
    from systems.no_memory import NoMemory

    return NoMemory(agent_rates=rates.agent)
