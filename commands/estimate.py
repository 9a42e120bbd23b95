"""estimate: a dry run that prints the expected model calls and tokens per phase, beside the caps.

No model call, no server. The slices of the requested mode are built in memory from the repaired
dataset (`dvc repro repair` first), only the conversations params `slice.conversations` keeps, as
the slice stage would; the memory system params `system` names estimates its build and answer
phases (systems/port.py), bench/estimate.py the judge's. The rates are params `estimate`, or,
with `--from RUN`, those a finished run shows (a run folder, or a git revision or DVC experiment
name; bench/estimate.py says what is read): each is printed with where it came from, then the
estimate beside the mode's cap.

Usage: `python -m commands.estimate [--mode lite|full|all] [--from RUN] [--json]`
(or `make estimate MODE=full [FROM=RUN]`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from bench.estimate import (
    RunData,
    estimate_judge,
    format_memory,
    format_rates,
    format_table,
    judge_rates_from_run,
    phases_json,
    read_run,
    run_rates,
)
from bench.repair import REPAIR_OUT
from bench.slice import Built, build_mode, cut_points, restrict
from clients.runs import open_run
from schemas.errors import ParamsError
from schemas.estimate import FinishedRun, RateOrigin, RoleEstimate, RunRates, with_total
from schemas.judging import JudgePrompts
from schemas.params import (
    MODES,
    EstimateParams,
    Mode,
    Params,
)
from schemas.records import ChatSlice, Question, Rubric
from stages.common import (
    load_fixture,
    read_params,
    read_repaired_rows,
    run_stage,
    scorer_prompts_if_fetched,
)
from systems.port import EstimatesMemory, MemorySystem, estimate_system
from systems.registry import load_system, system_name


def estimate_roles(
    system: MemorySystem,
    chats: Sequence[ChatSlice],
    questions: Sequence[Question],
    rubrics: Sequence[Rubric],
    rates: EstimateParams,
    prompts: JudgePrompts | None,
) -> dict[str, RoleEstimate]:
    """Every model role's estimate, and the total: the system's build and answers, the judge's
    calls (`rates.judge`; the system was built with its own rates)."""
    planned = estimate_system(system, chats, questions)
    estimates: dict[str, RoleEstimate] = {str(r): e for r, e in planned.by_role().items()}
    estimates["judge"] = estimate_judge(
        rubrics, {q.id: q.question for q in questions}, rates.judge, prompts
    )
    return with_total(estimates)


def build_slices(params: Params, mode: Mode) -> Built:
    """The mode's slices of the run's tier (the kept conversations only, cut as params
    `slice.cut` says), from the repaired dataset."""
    slice_params = params.slice
    fixture = load_fixture(Path(params.fixture))
    if mode not in fixture.modes:
        raise ParamsError(
            f"tier {params.tier} has no mode {mode!r}: its modes are {', '.join(fixture.modes)} "
            f"({params.fixture})"
        )
    return build_mode(
        read_repaired_rows(REPAIR_OUT),
        restrict(fixture.modes[mode], slice_params.conversations, mode),
        fixture.known_bad_rubric,
        slice_params.tokenizer,
        cut_points(fixture, slice_params.cut),
    )


def estimate_mode(
    params: Params, mode: Mode, rates: EstimateParams | None = None
) -> dict[str, RoleEstimate]:
    """The estimate of a whole run of `mode` for params `system`, with `rates` (default: params
    `estimate`)."""
    rates = rates or params.estimate
    built = build_slices(params, mode)
    system = load_system(params, mode=mode, rates=rates)
    chats = [s.chat for s in built.slices]
    prompts = scorer_prompts_if_fetched(params.judge)
    return estimate_roles(system, chats, built.questions, built.rubrics, rates, prompts)


def finished_run(run: RunData) -> FinishedRun:
    """What a system reads of a run of its own to take its rates from."""
    return FinishedRun(
        label=run.label,
        params=run.params,
        mode=run.mode,
        chats=run.chats,
        questions=run.questions,
        traces=run.traces,
        usage=run.usage,
        files=run.files,
    )


def rates_from_run(
    run: RunData, fallback: EstimateParams, prompts: JudgePrompts | None, system: MemorySystem
) -> RunRates:
    """The rates `run` shows, for an estimate of `system`: the judge's always (same harness);
    the build and answer rates only from a run of that same system."""
    judge, judge_origins = judge_rates_from_run(run, prompts, fallback.judge)
    origins = {f"judge.{k}": v for k, v in judge_origins.items()}
    rates = fallback.model_copy(update={"judge": judge})
    if run.system == system.name:
        measured, system_origins = system.rates_from_run(finished_run(run), fallback)
        rates = measured.model_copy(update={"judge": judge})
        origins |= system_origins
    else:
        for section in ("ingest", "agent"):
            for key in type(getattr(fallback, section)).model_fields:
                origins[f"{section}.{key}"] = RateOrigin(
                    source="params",
                    basis=f"the run is of system {run.system}, not {system.name}",
                )
    return run_rates(run, rates, origins, fallback)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m commands.estimate", description=__doc__)
    parser.add_argument("--mode", choices=MODES, default=None)
    parser.add_argument(
        "--from",
        dest="from_",
        metavar="RUN",
        default=None,
        help="take the rates from this finished run: a folder (a workspace or a copy of one), "
        "or a git revision or DVC experiment name of this repository",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    params = read_params()
    mode: Mode = args.mode or params.mode
    system = system_name(params)
    fallback = params.estimate
    prompts = scorer_prompts_if_fetched(params.judge)
    found: RunRates | None = None
    if args.from_:
        planned = load_system(params, system, mode=mode, rates=fallback)
        run = read_run(
            open_run(args.from_), lambda name: planned.run_files if name == system else {}
        )
        found = rates_from_run(run, fallback, prompts, planned)
    rates = found.rates if found else fallback
    built = build_slices(params, mode)
    memory_system = load_system(params, system, mode=mode, rates=rates)
    chats = [s.chat for s in built.slices]
    memory = (
        memory_system.estimate_memory(chats) if isinstance(memory_system, EstimatesMemory) else {}
    )
    estimates = estimate_roles(
        memory_system,
        chats,
        built.questions,
        built.rubrics,
        rates,
        prompts,
    )
    cap = params.budget.find(params.tier, mode)
    kept = params.slice.conversations
    label = f"tier {params.tier}, mode {mode}" + (
        f", conversations {', '.join(kept)} only" if kept else ""
    )
    label += f", system {system}"
    if args.json:
        print(
            json.dumps(
                {
                    "tier": params.tier,
                    "mode": mode,
                    "system": system,
                    "phases": phases_json(estimates),
                    "cap": cap.model_dump() if cap else None,
                    "memory": memory,
                    "rates": found.model_dump() if found else None,
                },
                indent=2,
            )
        )
        return
    if found:
        print(format_rates(found), end="\n\n")
    cap_calls, cap_tokens = (cap.calls, cap.tokens) if cap else (None, None)
    print(format_table(estimates, cap_calls, cap_tokens, label))
    if memory:
        where = f"system {system}, graph backend {params.graph.backend}: one server each"
        print("\n" + format_memory(memory, where if system == "graphrag" else f"system {system}"))
    source = f"rates from {found.run}" if found else "rates from settings.yaml `estimate`"
    print(f"({source})")


if __name__ == "__main__":
    run_stage(main)
