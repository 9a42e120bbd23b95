"""The systems under test by name: params `system` picks one, its params sections configure it.

    system = load_system()                     # params.yaml: system, mode and its sections
    system = load_system(answer_model=agent)   # full_context: the agent model's context window

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

from pathlib import Path
from typing import cast

from clients.llm.client import LlmClient, open_model
from clients.params_file import load_mode, load_params, read_params_file
from schemas.errors import ParamsError
from schemas.params import (
    AnswerParams,
    EstimateParams,
    FullContextParams,
    GraphParams,
    IngestParams,
    Mode,
    RagParams,
)
from systems.port import ANSWER_ROLE, SYSTEM_NAMES, MemorySystem, SystemName

DEFAULT_SYSTEM: SystemName = "graphrag"


def system_name(params_path: Path | None = None) -> SystemName:
    """The top-level `system` of params.yaml (absent: graphrag)."""
    name = read_params_file(params_path).get("system", DEFAULT_SYSTEM)
    if name not in SYSTEM_NAMES:
        raise ParamsError(
            f"params.yaml: system must be one of {', '.join(SYSTEM_NAMES)}, found {name!r}"
        )
    return cast(SystemName, name)


def load_system(
    name: SystemName | None = None,
    *,
    params_path: Path | None = None,
    answer_model: LlmClient | None = None,
    mode: Mode | None = None,
    rates: EstimateParams | None = None,
) -> MemorySystem:
    """The system `name` (default: params `system`) configured from params.yaml. `answer_model`
    gives full_context the context window when `full_context.context_tokens` is null (default:
    the agent's model as params name it, asked without a call). `mode`
    and `rates` replace params' `mode` and `estimate` (the estimate of another mode, or with
    rates taken from a run: stages/estimate.py)."""
    name = name or system_name(params_path)
    rates = rates or load_params("estimate", EstimateParams, params_path)
    if name == "graphrag":
        from systems.graphrag.system import GraphRag, ingest_settings

        answer = load_params("answer", AnswerParams, params_path)
        return GraphRag(
            settings=ingest_settings(
                load_params("ingest", IngestParams, params_path), mode or load_mode(params_path)
            ),
            graph=load_params("graph", GraphParams, params_path),
            max_steps=answer.max_steps,
            result_limit=answer.result_limit,
            text_tool_calls=answer.text_tool_calls,
            ingest_rates=rates.ingest,
            agent_rates=rates.agent,
        )
    if name == "rag":
        from systems.rag import Rag

        return Rag(
            chunk_tokens=load_params("ingest", IngestParams, params_path).chunk_tokens,
            top_k=load_params("rag", RagParams, params_path).top_k,
            agent_rates=rates.agent,
        )
    if name == "full_context":
        from systems.full_context import FullContext

        params = load_params("full_context", FullContextParams, params_path)
        model = answer_model

        def model_window() -> int | None:
            nonlocal model
            if model is None:  # the estimate: the agent's model as params name it (no call)
                model = open_model(ANSWER_ROLE, params_path=params_path)
            return model.context_window()

        return FullContext(
            context_tokens=params.context_tokens,
            reply_tokens=params.reply_tokens,
            agent_rates=rates.agent,
            model_window=model_window,
        )
    from systems.no_memory import NoMemory

    return NoMemory(agent_rates=rates.agent)
