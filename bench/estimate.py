"""estimate: a dry run that prints the expected model calls and tokens per phase, beside the caps.

No model call, no server. The slices of the requested mode are built in memory from the repaired
dataset (`dvc repro repair` first), then systems/graphrag/estimate.py computes each phase: extraction
exactly from the chunks and prompts, resolution with the `max_llm_pairs` cap, the agent from the
step limit, the judge from the rubrics; only the conversations params `slice.conversations` keeps,
as the slice stage would. Usage: `python -m stages.estimate [--mode lite|full|all]` (or
`make estimate MODE=full`).
"""

from __future__ import annotations

from pathlib import Path

from bench.judge import load_prompts, scorer_present
from bench.repair import REPAIR_OUT
from bench.slice import build_mode, load_fixture, read_rows, restrict
from clients.params_file import load_params
from schemas.params import (
    AnswerParams,
    EstimateParams,
    IngestParams,
    JudgeParams,
    Mode,
    SliceParams,
)
from stages.ingest import settings_for
from systems.graphrag.cost import PhaseEstimate
from systems.graphrag.estimate import estimate_run


def format_table(
    phases: dict[str, PhaseEstimate], cap_calls: int, cap_tokens: int, mode: str
) -> str:
    """The estimate as a small text table, with the mode's cap and whether the run fits."""
    lines = [
        f"Estimate for mode {mode} (no model call made):",
        f"{'phase':<12}{'calls':>10}{'prompt tokens':>16}{'completion':>12}{'tokens':>14}",
    ]
    for name, phase in phases.items():
        lines.append(
            f"{name:<12}{phase.calls:>10,}{phase.prompt_tokens:>16,}"
            f"{phase.completion_tokens:>12,}{phase.tokens:>14,}"
        )
    total = phases["total"]
    fits = total.calls <= cap_calls and total.tokens <= cap_tokens
    lines.append(f"{'cap':<12}{cap_calls:>10,}{'':>16}{'':>12}{cap_tokens:>14,}")
    lines.append(
        "within the cap" if fits else "OVER the cap: the run would stop before its first call"
    )
    return "\n".join(lines)


def estimate_mode(mode: Mode) -> dict[str, PhaseEstimate]:
    slice_params = load_params("slice", SliceParams)
    fixture = load_fixture(Path(slice_params.fixture))
    built = build_mode(
        read_rows(REPAIR_OUT),
        restrict(fixture.modes[mode], slice_params.conversations, mode),
        fixture.known_bad_rubric,
        slice_params.tokenizer,
    )
    settings = settings_for(load_params("ingest", IngestParams), mode)
    answer = load_params("answer", AnswerParams)
    judge = load_params("judge", JudgeParams)
    return estimate_run(
        [s.chat for s in built.slices],
        built.questions,
        built.rubrics,
        settings,
        answer.max_steps,
        load_params("estimate", EstimateParams),
        load_prompts(judge) if scorer_present(judge) else None,
    )
