"""estimate: the harness's part of the dry-run estimate, and the reading of a finished run's rates.

No model call, no server. `python -m commands.estimate` (or `make estimate MODE=full`) prints the
expected model calls and tokens per phase beside the mode's caps: the memory system estimates its
own build and answer phases (the one system-specific call, made by the stage), this module the
judge's (one call per rubric item, event ordering by its equivalence calls) and the table.

With `--from RUN` (`make estimate MODE=full FROM=...`) the rates come from a finished run instead
of params `estimate`: a folder holding a run (a workspace or a temporary copy of one), or a git
revision or DVC experiment name of this repository, opened by the door clients/runs.py (its data/
outs from the DVC cache, the rest from git). `read_run` reads the run's files into a `RunData`,
`judge_rates_from_run` measures the judge's rates on it, the system measures its own, and
`format_rates` prints each rate with where it came from; a rate the run cannot show keeps its
params value, and says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from clients.tokens import count_tokens
from schemas.errors import DataError
from schemas.estimate import RateOrigin, RoleEstimate, RunRates
from schemas.judging import JudgedQuestion, JudgePrompts
from schemas.layout import LAYOUT
from schemas.params import MODES, EstimateParams, JudgeRates, Mode, merge_settings
from schemas.records import ChatSlice, Question, Rubric
from schemas.runs import StageRun
from schemas.traces import Trace

EVENT_ORDERING = "event_ordering"


def estimate_judge(
    rubrics: Sequence[Rubric],
    questions: Mapping[str, str],
    rates: JudgeRates,
    prompts: JudgePrompts | None = None,
) -> RoleEstimate:
    """One call per rubric item (the judge prompt filled with question, item and answer); event
    ordering: equivalence calls per answer line and unused item. With the pinned prompts at hand
    their sizes are counted; without them the rates stand in. `prompt_ratio` turns the count
    (cl100k) into the judge model's own."""
    item_template = count_tokens(prompts.item_prompt) if prompts else rates.item_prompt_tokens
    equivalence_template = (
        count_tokens(prompts.equivalence_system) + count_tokens(prompts.equivalence_user)
        if prompts
        else rates.equivalence_prompt_tokens
    )
    calls = prompt = 0.0
    for rubric in rubrics:
        items = [count_tokens(item) for item in rubric.rubric]
        question = count_tokens(questions.get(rubric.question_id, ""))
        if rubric.ability == EVENT_ORDERING:
            per_item = rates.event_calls_per_item
            line = rates.answer_tokens / max(len(items), 1)
            calls += per_item * len(items)
            prompt += sum(per_item * (equivalence_template + t + line) for t in items)
        else:
            calls += len(items)
            prompt += sum(item_template + question + t + rates.answer_tokens for t in items)
    return RoleEstimate(
        round(calls),
        round(prompt * rates.prompt_ratio),
        round(calls * rates.completion_tokens_per_call),
    )


def format_table(
    estimates: Mapping[str, RoleEstimate], cap_calls: int | None, cap_tokens: int | None, label: str
) -> str:
    """The estimate as a small text table, with the mode's cap and whether the run fits (a tier's
    mode without a cap yet: says which setting to set)."""
    lines = [
        f"Estimate for {label} (no model call made):",
        f"{'phase':<12}{'calls':>10}{'prompt tokens':>16}{'completion':>12}{'tokens':>14}",
    ]
    for name, e in estimates.items():
        lines.append(
            f"{name:<12}{e.calls:>10,}{e.prompt_tokens:>16,}"
            f"{e.completion_tokens:>12,}{e.tokens:>14,}"
        )
    total = estimates["total"]
    if cap_calls is None or cap_tokens is None:
        lines.append(
            "no cap set for this tier's mode yet: set settings.yaml budget.tiers.<tier>.<mode>"
        )
        return "\n".join(lines)
    fits = total.calls <= cap_calls and total.tokens <= cap_tokens
    lines.append(f"{'cap':<12}{cap_calls:>10,}{'':>16}{'':>12}{cap_tokens:>14,}")
    lines.append(
        "within the cap" if fits else "OVER the cap: the run would stop before its first call"
    )
    return "\n".join(lines)


def format_memory(memory: Mapping[str, Mapping[str, float]], where: str) -> str:
    """Each conversation's expected memory as a text table (columns: what the system counts),
    then the largest and the sum of each column."""
    columns = list(next(iter(memory.values()), {}))
    width = max([len("conversation"), *(len(k) for k in columns)]) + 2
    lines = [
        f"Expected memory per conversation ({where}):",
        "conversation".ljust(14) + "".join(k.rjust(width) for k in columns),
    ]

    def row(label: str, values: Mapping[str, float]) -> str:
        return label.ljust(14) + "".join(f"{values[k]:>{width},}" for k in columns)

    for conversation, values in sorted(memory.items(), key=lambda kv: _number(kv[0])):
        lines.append(row(conversation, values))
    if len(memory) > 1:
        lines.append(row("largest", {k: max(v[k] for v in memory.values()) for k in columns}))
        lines.append(row("all", {k: round(sum(v[k] for v in memory.values()), 2) for k in columns}))
    return "\n".join(lines)


def _number(conversation: str) -> int:
    return int(conversation) if conversation.isdigit() else 0


# ---------------------------------------------------------------------------------------------
# A finished run's files
# ---------------------------------------------------------------------------------------------

_L = LAYOUT
MADE_BY = {
    f"{_L.slice.folder}/": "slice",
    f"{_L.ingest.folder}/": "ingest",
    str(_L.ingest.usage): "ingest",
    f"{_L.answer.folder}/": "answer",
    str(_L.answer.usage): "answer",
    f"{_L.judge.folder}/": "judge",
    str(_L.judge.usage): "judge",
}
"""Which stage writes a run file (by path prefix): named when the run lacks it."""
CHATS = str(_L.slice.chats)
QUESTIONS = str(_L.slice.questions)
RUBRICS = str(_L.slice.rubrics)
TRACES = str(_L.answer.traces)
JUDGED = str(_L.judge.questions)
USAGE = tuple(str(stage.usage) for stage in (_L.ingest, _L.answer, _L.judge))
RUN_INFO = tuple(str(stage.run) for stage in (_L.ingest, _L.answer, _L.judge))


def made_by(path: str) -> str | None:
    return next((stage for prefix, stage in MADE_BY.items() if path.startswith(prefix)), None)


class RunSource(Protocol):
    """Read access to one finished run's files, by path from the repository root."""

    @property
    def label(self) -> str:
        """Which run, for messages (`folder /tmp/x`, `revision exp-1a2b (1a2b3c4d5e6f)`)."""

    def read(self, path: str) -> str | None:
        """The file's text, or None where the run has no such file."""

    def list(self, folder: str) -> list[str]:
        """Paths of the files directly in `folder` (empty where there is none)."""


def require(source: RunSource, path: str) -> str:
    """The file's text, or a DataError naming the file and the stage that writes it."""
    text = source.read(path)
    if text is None:
        stage = made_by(path)
        made = f"the `{stage}` stage writes it" if stage else "every run holds it"
        raise DataError(
            f"{source.label} has no {path} ({made}): take the rates from a run that finished "
            "(`dvc repro` there), or name another run"
        )
    return text


def _rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class RunData:
    """What the estimator reads of one finished run (one system's, one mode's)."""

    label: str
    params: Mapping[str, Any]
    """The run's params.yaml over its settings.yaml."""
    mode: Mode
    system: str
    models: Mapping[str, str]
    test_model: bool
    chats: Sequence[ChatSlice]
    questions: Sequence[Question]
    rubrics: Sequence[Rubric]
    traces: Sequence[Trace]
    judged: Sequence[JudgedQuestion]
    """The judge's rows (`LAYOUT.judge.questions`): one per question, with its `judge_calls`."""
    usage: Mapping[str, Mapping[str, int]]
    """Role -> {calls, prompt_tokens, completion_tokens}, from every metrics/usage/ file."""
    files: Mapping[str, str]
    """The system's own files it asked for, by path."""


def _judged(text: str, label: str) -> list[JudgedQuestion]:
    try:
        return [JudgedQuestion.model_validate(row) for row in _rows(text)]
    except ValidationError as exc:
        raise DataError(f"{JUDGED} of {label} is not the judge's question rows: {exc}") from exc


def parse_stage_run(text: str, path: str, label: str) -> StageRun:
    """A stage's run record read from a run (a DataError naming the file when it is invalid)."""
    try:
        return StageRun.model_validate_json(text)
    except ValidationError as exc:
        raise DataError(f"{path} of {label} is not a stage's run record: {exc}") from exc


def read_run(source: RunSource, system_files: Callable[[str], Mapping[str, str]]) -> RunData:
    """Read a finished run. `system_files(system)`: the files that system's rates need beside
    the harness's (path -> the stage that writes it)."""
    params = yaml.safe_load(require(source, "params.yaml")) or {}
    settings_text = source.read("settings.yaml")  # a run from before the split has none
    settings = (yaml.safe_load(settings_text) or {}) if settings_text is not None else {}
    for name, data in (("params.yaml", params), ("settings.yaml", settings)):
        if not isinstance(data, dict):
            raise DataError(f"{name} of {source.label} is not a mapping of sections")
    params = merge_settings(settings, params)
    infos = [
        parse_stage_run(text, path, source.label)
        for path in RUN_INFO
        if (text := source.read(path)) is not None
    ]
    mode = next((i.mode for i in infos), params.get("mode"))
    if mode not in MODES:
        raise DataError(f"{source.label}: its mode {mode!r} is none of {', '.join(MODES)}")
    system = str(params.get("system") or "graphrag")
    chat_files = [p for p in source.list(CHATS) if p.endswith(".json")]
    if not chat_files:
        raise DataError(
            f"{source.label} has no conversation slices in {CHATS}/ (the `slice` stage writes "
            "them): take the rates from a run that finished, or name another run"
        )
    chats = sorted(
        (ChatSlice.model_validate_json(require(source, p)) for p in chat_files),
        key=lambda c: int(c.conversation_id) if c.conversation_id.isdigit() else 0,
    )
    usage: dict[str, Mapping[str, int]] = {}
    for path in USAGE:
        text = source.read(path)
        if text is not None:
            usage |= json.loads(text)
    models = {str(m.role): str(m.model) for info in infos for m in info.models}
    return RunData(
        label=source.label,
        params=params,
        mode=mode,
        system=system,
        models=models,
        test_model=any(bool(i.test_model) for i in infos),
        chats=chats,
        questions=[Question.model_validate(r) for r in _rows(require(source, QUESTIONS))],
        rubrics=[Rubric.model_validate(r) for r in _rows(require(source, RUBRICS))],
        traces=[Trace.model_validate(r) for r in _rows(require(source, TRACES))],
        judged=_judged(require(source, JUDGED), source.label),
        usage=usage,
        files={path: require(source, path) for path in system_files(system)},
    )


def usage_of(run: RunData, role: str, path: str) -> Mapping[str, int]:
    """The run's usage of one role, or a DataError naming the usage file that should hold it."""
    used = run.usage.get(role)
    if used is None:
        raise DataError(
            f"{run.label} has no usage of the {role} model ({path}, which the `{made_by(path)}` "
            "stage writes): take the rates from a run that finished, or name another run"
        )
    return used


def judge_rates_from_run(
    run: RunData, prompts: JudgePrompts | None, fallback: JudgeRates
) -> tuple[JudgeRates, dict[str, RateOrigin]]:
    """The judge's rates a run shows: the answers' length (its traces), completion tokens per
    call and the equivalence calls per event-ordering item (its judge rows and usage), and the
    ratio of the judge's prompt tokens to the estimator's count of the same prompts (cl100k,
    with the same `prompts`). The unfilled template sizes stay as params have them: the pinned
    prompts, when at hand, are counted instead."""
    used = usage_of(run, "judge", str(_L.judge.usage))
    origins: dict[str, RateOrigin] = {}
    values: dict[str, float] = {}
    answers = [count_tokens(t.answer) for t in run.traces]
    if answers:
        values["answer_tokens"] = sum(answers) / len(answers)
        origins["answer_tokens"] = RateOrigin(
            source="run", basis=f"{sum(answers):,} tokens over {len(answers):,} answers"
        )
    calls = int(used.get("calls", 0))
    if calls:
        values["completion_tokens_per_call"] = used["completion_tokens"] / calls
        origins["completion_tokens_per_call"] = RateOrigin(
            source="run",
            basis=f"{used['completion_tokens']:,} completion tokens over {calls:,} calls",
        )
    rubrics = {r.question_id: r for r in run.rubrics}
    judged = [r for r in run.judged if r.question_id in rubrics]
    events = [r for r in judged if r.ability == EVENT_ORDERING]
    items = sum(len(rubrics[r.question_id].rubric) for r in events)
    if items:
        event_calls = sum(r.judge_calls for r in events)
        values["event_calls_per_item"] = event_calls / items
        origins["event_calls_per_item"] = RateOrigin(
            source="run", basis=f"{event_calls:,} equivalence calls over {items:,} events"
        )
    else:
        origins["event_calls_per_item"] = RateOrigin(
            source="params", basis="no event-ordering question in the run"
        )
    measured = fallback.model_copy(update=values | {"prompt_ratio": 1.0})
    counted = estimate_judge(
        [rubrics[r.question_id] for r in judged],
        {q.id: q.question for q in run.questions},
        measured,
        prompts,
    ).prompt_tokens
    if counted and calls and used["prompt_tokens"]:
        values["prompt_ratio"] = used["prompt_tokens"] / counted
        origins["prompt_ratio"] = RateOrigin(
            source="run",
            basis=f"{used['prompt_tokens']:,} prompt tokens, counted {counted:,} (cl100k)",
        )
    templates = "the pinned prompts are counted instead" if prompts else "not in a run's files"
    for key in ("item_prompt_tokens", "equivalence_prompt_tokens"):
        origins[key] = RateOrigin(source="params", basis=templates)
    for key in JudgeRates.model_fields:
        origins.setdefault(
            key, RateOrigin(source="params", basis="the run's judge calls do not show it")
        )
    return JudgeRates.model_validate(fallback.model_dump() | values), origins


def run_rates(
    run: RunData,
    rates: EstimateParams,
    origins: Mapping[str, RateOrigin],
    fallback: EstimateParams,
) -> RunRates:
    """The record of rates taken from `run`: every rate of `rates` with its origin (those the
    measurements left out: params, as not shown by this run)."""
    complete = dict(origins)
    for section, model in (
        ("ingest", fallback.ingest),
        ("agent", fallback.agent),
        ("judge", fallback.judge),
    ):
        for key in type(model).model_fields:
            complete.setdefault(
                f"{section}.{key}",
                RateOrigin(source="params", basis=f"a {run.system} run does not show it"),
            )
    return RunRates(
        run=run.label,
        system=run.system,
        mode=run.mode,
        models=dict(run.models),
        test_model=run.test_model,
        rates=rates,
        origins=dict(sorted(complete.items())),
    )


def format_rates(found: RunRates) -> str:
    """Each rate, its value and where it came from, under a line naming the run."""
    models = ", ".join(f"{role} {model}" for role, model in found.models.items()) or "unknown"
    lines = [f"Rates from {found.run}: system {found.system}, mode {found.mode}, models: {models}."]
    if found.test_model:
        lines.append(
            "That run used the scripted test model: these rates describe that model and measure "
            "nothing about a real one."
        )
    lines.append(f"{'rate':<42}{'value':>12}  {'from':<7}basis")
    sections = found.rates.model_dump()
    for key, origin in found.origins.items():
        section, name = key.split(".", 1)
        value = float(sections[section][name])
        lines.append(f"{key:<42}{value:>12,.4g}  {origin.source:<7}{origin.basis}")
    return "\n".join(lines)


def phases_json(estimates: Mapping[str, RoleEstimate]) -> dict[str, dict[str, int]]:
    """The estimate's `phases` in `commands.estimate --json`: per role and the total."""
    return {
        name: {
            "calls": p.calls,
            "prompt_tokens": p.prompt_tokens,
            "completion_tokens": p.completion_tokens,
            "tokens": p.tokens,
        }
        for name, p in estimates.items()
    }
