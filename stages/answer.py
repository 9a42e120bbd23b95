"""answer: the agent answers each question from its conversation's graph.

Per conversation: start its own Neo4j, import the ingest stage's graph file, answer that
conversation's questions with the tool-using agent (systems/graphrag/agent.py), stop the server. Writes
`data/answer/traces.jsonl` (one `Trace` per question, in question order), a NOTICE beside it
(traces quote the chat: CC BY-SA 4.0), `data/answer/run.json` (the model),
`data/answer/summary.json` (counts, steps and the agent's context size),
`metrics/usage/answer.json` (the model calls and tokens the answers took) and
`metrics/answer.json` (the phase's seconds: wall time never goes into a DVC out).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.usage import usage_path, write_usage
from clients.files import read_jsonl, remove_outputs, write_json, write_jsonl
from clients.graph import start_graph
from clients.llm.accounting import Accounting
from clients.llm.client import open_model
from clients.params_file import load_mode, load_params
from clients.workdir import stage_workdir
from schemas.errors import DataError, check_failed_share
from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS
from schemas.params import AnswerParams, EstimateParams, GraphParams
from schemas.records import Question
from schemas.traces import Trace
from stages.common import progress, run_stage, stage_seconds
from systems.graphrag.agent import SYSTEM_PROMPT, GraphTools, answer_question
from systems.graphrag.cost import estimate_answer

QUESTIONS = Path("data/slice/questions.jsonl")
GRAPHS = Path("data/ingest")
OUT_DIR = Path("data/answer")
METRICS = Path("metrics/answer.json")
NOTICE = """The traces in this folder quote and adapt the chat of BEAM (Tavakoli et al.,
Hugging Face dataset Mohammadta/BEAM), licensed CC BY-SA 4.0
(https://creativecommons.org/licenses/by-sa/4.0/). They are adapted material under the same
licence: share them only under CC BY-SA 4.0, with this attribution.
"""


SEARCHABLE = frozenset({"Chunk", *ENTITY_LABELS, *STATEMENT_LABELS})


def searchable_items(graph_file: Path) -> int:
    """Chunks, entities and statements in an ingest graph file: what the agent's tools search."""
    with graph_file.open(encoding="utf-8") as lines:
        nodes = (json.loads(line).get("node") for line in lines if line.strip())
        return sum(1 for node in nodes if node is not None and node.get("label") in SEARCHABLE)


def nearest_rank(values: list[int], share: float) -> int:
    """The smallest value with at least `share` of the values at or below it (one of them)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summarize(traces: list[Trace]) -> dict[str, Any]:
    """data/answer/summary.json: counts, steps and the agent's context size per question (the
    largest prompt of its calls: median, 95th percentile by nearest rank, max)."""
    if not traces:
        return {"questions": 0}
    contexts = [t.max_context_tokens for t in traces]
    return {
        "questions": len(traces),
        "errors": sum(1 for t in traces if t.error),
        "empty_answers": sum(1 for t in traces if not t.answer),
        "tool_calls": sum(len(t.tool_calls) for t in traces),
        "tool_errors": sum(1 for t in traces for c in t.tool_calls if c.error),
        "steps_mean": statistics.fmean(t.steps for t in traces),
        "context_tokens_median": statistics.median(contexts),
        "context_tokens_p95": nearest_rank(contexts, 0.95),
        "context_tokens_max": max(contexts),
    }


def usage(traces: list[Trace]) -> dict[str, int]:
    """The agent's calls and tokens, from the traces (the same when served from the cache)."""
    return {
        "calls": sum(t.calls for t in traces),
        "prompt_tokens": sum(t.prompt_tokens for t in traces),
        "completion_tokens": sum(t.completion_tokens for t in traces),
    }


def main() -> None:
    mode = load_mode()
    params = load_params("answer", AnswerParams)
    graph_params = load_params("graph", GraphParams)
    questions = read_jsonl(QUESTIONS, Question)
    by_conversation: dict[str, list[Question]] = defaultdict(list)
    for question in questions:
        by_conversation[question.conversation_id].append(question)
    missing = [c for c in by_conversation if not (GRAPHS / f"conv{c}.jsonl").is_file()]
    if missing:
        raise DataError(
            f"no graph for conversation(s) {', '.join(missing)} in {GRAPHS}: run `dvc repro ingest`"
        )
    remove_outputs(OUT_DIR, METRICS, usage_path("answer"))

    accounting = Accounting()
    agent = open_model("agent", accounting=accounting)
    agent.check_endpoint()
    rates = load_params("estimate", EstimateParams).agent
    graph_items = {c: searchable_items(GRAPHS / f"conv{c}.jsonl") for c in by_conversation}
    estimate = estimate_answer(questions, params.max_steps, rates, SYSTEM_PROMPT, graph_items)
    if agent.budget is not None:
        agent.budget.check_estimate(estimate.calls, estimate.tokens, what=f"answer ({mode})")

    traces: dict[str, Trace] = {}
    with stage_workdir("beam-answer-") as workdir:
        for conversation in sorted(by_conversation, key=int):
            with start_graph(graph_params, Path(workdir), name=f"conv{conversation}") as store:
                store.import_jsonl(GRAPHS / f"conv{conversation}.jsonl")
                tools = GraphTools(store, limit=params.result_limit)
                asked = by_conversation[conversation]
                for question in progress(asked, total=len(asked), desc=f"conv{conversation}"):
                    trace = answer_question(question, agent, tools, max_steps=params.max_steps)
                    traces[question.id] = trace
            done = [traces[q.id] for q in by_conversation[conversation]]
            print(
                f"answer conv{conversation}: {len(done)} questions, "
                f"{sum(t.calls for t in done)} model calls, "
                f"{sum(1 for t in done if t.error)} errors",
                file=sys.stderr,
            )
    ordered = [traces[q.id] for q in questions]
    failed = [t for t in ordered if t.error is not None]
    check_failed_share(
        "answer",
        "questions",
        len(failed),
        len(ordered),
        params.max_failed_share,
        failed[-1].error if failed else None,
    )
    write_jsonl(OUT_DIR / "traces.jsonl", ordered)
    (OUT_DIR / "NOTICE").write_text(NOTICE, encoding="utf-8")
    write_json(
        OUT_DIR / "run.json",
        {
            "mode": mode,
            "models": [agent.metadata()],
            "test_model": agent.test_model,
        },
    )
    write_json(OUT_DIR / "summary.json", summarize(ordered))
    write_usage("answer", {"agent": usage(ordered)})
    # The model layer's wait on the agent's calls (none for cache hits): metrics only.
    write_json(
        METRICS,
        {
            "seconds": {
                "agent": accounting.to_metrics()["agent"]["seconds"],
                "stage_answer": stage_seconds(),
            }
        },
    )


if __name__ == "__main__":
    run_stage(main)
