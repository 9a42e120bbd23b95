"""report: the record of a run — metrics for `dvc metrics show`, plots, and reports/memory.md.

Reads the results the other stages wrote (data/judge/questions.jsonl and summary.json,
data/answer/summary.json and leak_check.json, data/ingest/graphs.json, the run.json of ingest,
answer and judge with the models and whether the system reads gold evidence), the calls and
tokens each phase took (metrics/usage/<stage>.json) and the pins in pins.yaml, never the stages'
wall-time files (metrics/wall_time/), which would make the report stale after a re-run that
changed no result. Computes seeded bootstrap confidence intervals
(resampling questions) per ability and overall, and the dry-run estimate per phase beside the
actual figures, into one typed `RunRecord` (schemas/run_record.py). Writes it once
(`metrics/run_record.json`, what the run's page and `make compare` read), and from the same
values, as outputs only (nothing reads them back): `metrics/report.json` (the headline),
`metrics/plots/abilities.csv`, `metrics/plots/cost.csv`, `reports/memory.md` and the page.
`python -m stages.report --print` prints the record in the terminal.

A run whose system reads gold evidence (systems/port.py `reads_gold`: the oracle) is an upper
bound, never a memory system's score: its record says so in its title, first lines, settings and
caveats, and its headline carries `gold.reads: 1` (the only key of that group, absent otherwise,
so a sweep's `dvc exp show` grows by one column only where an oracle ran). Every record has the
leak check's line (bench/leak_check.py) under the headline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from bench.leak_check import leak_verdict
from clients.local_servers.local_model.pins import LOCAL_MODELS
from schemas.headline import Headline
from schemas.judge_check import KINDS, JudgeCheckSummary
from schemas.judging import JudgedQuestion, JudgeSummary
from schemas.layout import LAYOUT
from schemas.leak_check import LeakCheck
from schemas.params import (
    Release,
    ReportParams,
)
from schemas.records import ABILITIES, Question, SliceSource
from schemas.roles import COST_KEYS, ROLES, cost_key
from schemas.run_record import (
    OVERALL,
    TOTAL,
    CostRow,
    Failures,
    FlagCounts,
    RunRecord,
    ScoreRow,
)
from schemas.runs import MemorySizes, RunSummary, StageRun, summarize_runs
from schemas.traces import AnswerSummary

if TYPE_CHECKING:
    from schemas.estimate import RoleEstimate

# The stage's heavy imports (numpy, the estimator, the judge's and ingest's modules) are made
# inside the functions that use them, so `python -m stages.report --print` starts at once.

RECORD = LAYOUT.report.record
RUN_RECORD = LAYOUT.report.run_record
VIEWER = LAYOUT.report.page
WALL_TIME_STAGES = ("ingest", "answer", "judge", "judge_check")
"""Stages whose wall-time file (`LAYOUT.<stage>.wall_time`) holds `seconds.stage_<stage>`, the wall
time of their last run."""
METRICS = LAYOUT.report.metrics
ABILITY_PLOT = LAYOUT.report.abilities_plot
COST_PLOT = LAYOUT.report.cost_plot
QUESTION_SCORES = LAYOUT.report.questions
TEST_MODEL_WARNING = (
    "**This run used a test model (`scripted/rules`): its scores measure nothing.** It checks "
    "that the pipeline runs end to end, not how good any memory system is."
)


def reads_gold_warning(system: str) -> str:
    """The flag of a run whose system reads gold evidence (systems/port.py `reads_gold`)."""
    return (
        f"**This run reads gold evidence: `{system}` is given each question's cited messages "
        "(the rubrics' `source_chat_ids`). Its score is an upper bound, the answer model's "
        "ceiling with perfect memory, not a memory system's score: never report it as a "
        "headline.**"
    )


def annotations_warning() -> str:
    """The flag of a run whose answerer saw judge-side annotations (`answer.protocol: exabase`)."""
    return (
        "**The answerer saw judge-side annotations (`answer.protocol: exabase`): each question "
        "came with ExaBase's guidance, built from the dataset's annotations for the judge (the "
        "events to order, the time points and the calculation, the preference or instruction "
        "under test with its compliance indicators, why a question is unanswerable, a summary's "
        "rubric items). ExaBase's protocol, reproduced: never compare it with a run of the "
        "benchmark's own protocol (the question alone).**"
    )


def leak_line(check: LeakCheck | None, reads_gold: bool, annotated: bool = False) -> str:
    """The leak check under the headline, bold where it found gold in a prompt."""
    verdict = leak_verdict(check, reads_gold, annotated)
    return (
        f"**Leak check: {verdict}.**" if verdict.startswith("LEAK") else f"Leak check: {verdict}."
    )


def small_model_warning(name: str) -> str:
    """The flag of a model the harness serves itself (clients/local_servers/local_model/pins.py's
    table)."""
    size_mb = LOCAL_MODELS[name].weights.gguf_size / 1e6
    return (
        f"**This run used `{name}`, a {size_mb:.0f} MB model served on this machine: a model "
        "this small measures nothing about memory.** It shows that the pipeline runs on a real "
        "model here, not how good any memory system is."
    )


def bootstrap_interval(
    values: Sequence[float], *, samples: int, confidence: float, seed: Sequence[int]
) -> tuple[float | None, float | None]:
    """Percentile interval of the mean, resampling the values with replacement (seeded)."""
    if not values:
        return None, None
    import numpy as np

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(list(seed))
    means = data[rng.integers(0, len(data), size=(samples, len(data)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def score_table(rows: Sequence[JudgedQuestion], params: ReportParams) -> dict[str, ScoreRow]:
    """Per ability (all ten) and overall: n, score, CI, score excluding known-bad, recall."""
    table: dict[str, ScoreRow] = {}
    for index, group in enumerate([*ABILITIES, "overall"]):
        members = [r for r in rows if group == "overall" or r.ability == group]
        scores = [r.score for r in members]
        kept = [
            r.score_excluding_known_bad for r in members if r.score_excluding_known_bad is not None
        ]
        recalls = [r.evidence_recall for r in members if r.evidence_recall is not None]
        low, high = bootstrap_interval(
            scores,
            samples=params.bootstrap_samples,
            confidence=params.confidence,
            seed=(params.seed, index),
        )
        beam = [r.score_beam_code for r in members]
        table[group] = ScoreRow(
            n=len(members),
            score=_mean(scores),
            score_beam_code=_mean(beam),
            ci_low=low,
            ci_high=high,
            score_excluding_known_bad=_mean(kept),
            evidence_recall=_mean(recalls),
        )
    return table


def sum_usage(
    stages: Sequence[Mapping[str, Mapping[str, int]]],
) -> dict[str, dict[str, int]]:
    """Each role's calls and tokens summed over the stages' usage files (a role may be called in
    more than one stage: the embedder in the build and for the questions)."""
    total: dict[str, dict[str, int]] = {}
    for usage in stages:
        for role, used in usage.items():
            row = total.setdefault(role, {})
            for key, value in used.items():
                if isinstance(value, int):
                    row[key] = row.get(key, 0) + value
    return total


def cost_table(
    usage: Mapping[str, Mapping[str, int]], estimate: Mapping[str, RoleEstimate]
) -> dict[str, CostRow]:
    """Calls and tokens per role (under its `cost_key`) and their total that the results took,
    from metrics/usage/ (the same whether made in this run or served from the call cache), the
    estimate beside them."""
    table: dict[str, CostRow] = {}
    for role in ROLES:
        used = usage.get(role) or {}
        planned = estimate[role]
        table[cost_key(role)] = CostRow(
            calls=int(used.get("calls", 0)),
            tokens=int(used.get("prompt_tokens", 0) + used.get("completion_tokens", 0)),
            estimate_calls=planned.calls,
            estimate_tokens=planned.tokens,
        )
    rows = list(table.values())
    table[TOTAL] = CostRow(
        calls=sum(r.calls for r in rows),
        tokens=sum(r.tokens for r in rows),
        estimate_calls=sum(r.estimate_calls for r in rows),
        estimate_tokens=sum(r.estimate_tokens for r in rows),
    )
    return table


FAILURE_LABELS = {
    "extraction_calls": "extraction calls",
    "resolution_calls": "resolution and link calls",
    "questions_in_error": "questions whose agent call failed",
    "judge_calls": "judge calls",
    "tool_errors": "tool calls that returned an error to the agent",
}


def failure_counts(ingest: MemorySizes, answer: AnswerSummary, judge: JudgeSummary) -> Failures:
    """What failed in the run, stage by stage: model calls that failed after their retries (a
    run has them only where `max_failed_share` tolerated them) and tool errors the agent saw.
    From data/ingest/graphs.json, data/answer/summary.json and data/judge/summary.json."""
    total = ingest.total
    return Failures(
        extraction_calls=int(total.get("failed_extractions", 0)),
        resolution_calls=int(
            total.get("failed_resolution_calls", 0) + total.get("failed_link_calls", 0)
        ),
        questions_in_error=answer.errors or 0,
        judge_calls=judge.overall.failed_calls,
        tool_errors=answer.tool_errors or 0,
    )


def count_flags(rows: Sequence[JudgedQuestion]) -> FlagCounts:
    """How many questions carry each flag."""
    return FlagCounts.model_validate(
        {flag: sum(flag in r.flags for r in rows) for flag in FlagCounts.model_fields}
    )


def failure_line(failures: Failures) -> str:
    """One line for the headline: every count, failed model calls first."""
    failed = failures.model_calls
    parts = ", ".join(f"{getattr(failures, k):,} {label}" for k, label in FAILURE_LABELS.items())
    verdict = (
        f"**{failed:,} model calls failed after retries; their items scored 0**"
        if failed
        else "No model call failed"
    )
    return f"{verdict} (failed: {parts})."


def release_pins(release: Release) -> dict[str, str]:
    """The record's pins of the dataset: the release's files at their commit, and the bytes
    verify-hash held them to (10M: both shards, in the order read)."""
    return {
        "dataset": f"{release.repo_id}@{release.revision}:"
        + ", ".join(f.filename for f in release.files),
        "dataset sha256": "; ".join(f"{f.sha256} ({f.size_bytes:,} bytes)" for f in release.files),
    }


def source_pins(source: SliceSource) -> dict[str, str]:
    """The record's pins of what the slices were cut from: the chat cut and the repaired
    messages (data/slice/source.json)."""
    if source.cut == "official":
        left = sum(source.left_out.values())
        cut = (
            f"official: what the benchmark's answer code reads (its chat_trunecated.json); "
            f"{left:,} messages of {len(source.left_out)} conversation(s) left out"
            + (f" ({', '.join(f'{c} {n}' for c, n in source.left_out.items())})" if left else "")
        )
    else:
        cut = "full: every message"
    repaired = ", ".join(
        f"conversation {r.conversation_id} message {r.message_id}" for r in source.repaired
    )
    return {
        "chat cut (params slice.cut)": cut,
        "repaired messages (pins.yaml repair)": repaired or "none in this run's slices",
    }


def headline_failures(failures: Failures) -> dict[str, int]:
    """The headline's three counts: `model_calls` that failed after their retries (every stage's,
    the number the record's failure line leads with), of them the `questions_in_error` (the
    agent's), and the `tool_errors` the agent saw. Per stage: the record's failure line."""
    return {
        "model_calls": failures.model_calls,
        "questions_in_error": failures.questions_in_error,
        "tool_errors": failures.tool_errors,
    }


def _numbers(values: Mapping[str, float | int | None]) -> dict[str, float | int]:
    """The entries that hold a number (DVC drops nulls from its tables, so none is written)."""
    return {k: v for k, v in values.items() if v is not None}


def build_metrics(
    scores: Mapping[str, ScoreRow],
    answer: AnswerSummary,
    cost: Mapping[str, CostRow],
    flags: FlagCounts,
    failures: Failures,
    judge_check: JudgeCheckSummary,
    reads_gold: bool = False,
    protocol_score: Mapping[str, float] | None = None,
    annotated: bool = False,
) -> Headline:
    """The headline (`LAYOUT.report.metrics`): numbers only, two levels, no null.

    `questions`, `score` and its interval exist for an ability only where it has questions (a
    missing number, not a null or a made-up 0: `dvc exp show` has no column for an ability no run
    asked).
    Every other key is written in every mode. Wall time is not here: each stage's wall-time file
    holds the seconds of its phases (`seconds.<phase>`), so that a re-run served from the call
    cache leaves the report as it was. Per ability detail (excluding known-bad, evidence recall,
    event F1 and tau, flags) is in the record, the run record and data/judge/summary.json.
    `gold` holds `reads: 1` for a run whose system reads gold evidence (an upper bound),
    `annotations: 1` for one whose answerer saw judge-side annotations (`answer.protocol:
    exabase`), nothing otherwise."""
    asked = [g for g in (*ABILITIES, OVERALL) if scores[g].n]
    overall = scores[OVERALL]
    return Headline(
        score=_numbers({g: scores[g].score for g in asked}),
        # an interval needs two questions to resample (with one it would be the score twice)
        score_ci_low=_numbers({g: scores[g].ci_low for g in asked if scores[g].n >= 2}),
        score_ci_high=_numbers({g: scores[g].ci_high for g in asked if scores[g].n >= 2}),
        score_excluding_known_bad=_numbers({OVERALL: overall.score_excluding_known_bad}),
        score_beam_code=_numbers({OVERALL: overall.score_beam_code}),
        evidence_recall=_numbers({OVERALL: overall.evidence_recall}),
        questions={
            **{g: scores[g].n for g in asked},
            "known_bad_rubric": flags.known_bad_rubric,
        },
        agent=_numbers({"context_tokens_p95": answer.context_tokens_p95}),
        failures=headline_failures(failures),
        judge_check={"agreement": judge_check.agreement.overall},
        # calls per phase are in the record, the plots and the run's page: here only their total
        # (each key is a column of `dvc exp show`, which must stay within 80)
        cost_calls={TOTAL: cost[TOTAL].calls},
        cost_tokens={p: cost[p].tokens for p in (*COST_KEYS, TOTAL)},
        gold=({"reads": 1} if reads_gold else {}) | ({"annotations": 1} if annotated else {}),
        protocol_score=dict(protocol_score or {}),
    )


def regime_line(run: RunSummary) -> str:
    """How the answer model used the memory (params `answer.regime`, systems/regimes.py)."""
    if run.regime is None:
        return "Answer regime: the system's own (a run made before answer regimes)."
    how = {
        "one_shot": "one call with what the memory's search found, no tools",
        "agent": "a tool loop over the memory",
    }[run.regime]
    own = "the system's own answer" if run.native_regime else "not the system's own answer"
    return f"Answer regime: **{run.regime}** ({how}; {own}; params `answer.regime`)."


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def judge_check_line(summary: JudgeCheckSummary, warning: str | None) -> str:
    """The judge check beside the headline: agreement on the known cases, per kind (by name),
    and the warning when it is below judge_check.min_agreement."""
    kinds = ", ".join(f"{kind} {summary.agreement.of(kind):.0%}" for kind in sorted(KINDS))
    line = (
        f"Judge agreement {summary.agreement.overall:.0%} on "
        f"{summary.cases.overall} known cases ({kinds}; parse failures "
        f"{summary.parse_failure_rate:.0%})."
    )
    return line if warning is None else f"{line} **Warning: {warning}.**"


def _conversation_number(name: str) -> int:
    digits = name.removeprefix("conv")
    return int(digits) if digits.isdigit() else -1


def _interval(row: ScoreRow) -> str:
    """`low–high`; with one question there is nothing to resample: `n = 1`."""
    if row.n == 0:
        return "–"
    if row.n == 1:
        return "n = 1"
    return f"{fmt(row.ci_low)}–{fmt(row.ci_high)}"


def stage_time(stage: str, metrics: Mapping[str, Any]) -> float | None:
    """The wall time of a stage's last run, from its wall-time file (`seconds.stage_<stage>`)."""
    seconds = metrics.get("seconds")
    value = seconds.get(f"stage_{stage}") if isinstance(seconds, dict) else None
    return float(value) if isinstance(value, int | float) else None


def render_times(times: Mapping[str, float]) -> str:
    """What `--print` adds below the record: wall time lives in metrics/wall_time/, never in the
    record, so that the record of unchanged results stays byte-identical."""
    if not times:
        return ""
    rows = [f"| {stage} | {seconds:,.1f} |" for stage, seconds in times.items()]
    return "\n".join(
        [
            "",
            "## Wall time of the last run (from `metrics/wall_time/<stage>.json`)",
            "",
            "| stage | seconds |",
            "|---|---:|",
            *rows,
            "",
        ]
    )


@dataclass(frozen=True)
class RecordInputs:
    """What the record (`LAYOUT.report.record`) is made from: the run's record and what it shows
    that the run record does not keep; `render_record` reads nothing else."""

    record: RunRecord
    settings: Mapping[str, Any]
    """The system's settings as it shows them (`MemorySystem.record_settings`)."""
    rows: Sequence[JudgedQuestion]
    memories: Mapping[str, Mapping[str, int | float]]
    """Each conversation's memory size (`MemorySizes.conversations`)."""


def render_record(inputs: RecordInputs) -> str:
    """The Markdown record a reader needs to trust (or distrust) a run."""
    from bench.beam_code import DIFFERENCES, OUR_CHOICES

    record, settings, rows, ingest = inputs.record, inputs.settings, inputs.rows, inputs.memories
    run, pins, scores, judge, cost = (
        record.run,
        record.pins,
        record.scores,
        record.judge,
        record.cost,
    )
    flags, failures, judge_check = record.flags, record.failures, record.judge_check
    judge_warning, confidence = record.judge_warning, record.confidence

    system = run.system
    bound = " (reads gold evidence: an upper bound)" if run.reads_gold else ""
    out: list[str] = [f"# BEAM memory benchmark: {system}{bound}, {run.mode} run", ""]
    if run.reads_gold:
        out += [reads_gold_warning(system), ""]
    if run.annotated:
        out += [annotations_warning(), ""]
    if run.test_model:
        out += [TEST_MODEL_WARNING, ""]
    for name in run.small_models:
        out += [small_model_warning(name), ""]
    overall = scores[OVERALL]
    out += [
        f"Overall score **{fmt(overall.score)}** "
        f"({confidence:.0%} CI {_interval(overall)}) over "
        f"{overall.n} questions; excluding known-bad rubrics "
        f"{fmt(overall.score_excluding_known_bad)}.",
        "",
        f"Benchmark-code score (`beam_code`, what BEAM's published code computes from the same "
        f"verdicts; line it up with published tables): **{fmt(overall.score_beam_code)}**"
        ' (see "Ours and the benchmark\'s code" below).',
        "",
        failure_line(failures),
        "",
        leak_line(record.leak_check, run.reads_gold, run.annotated),
        "",
        judge_check_line(judge_check, judge_warning),
        "",
        "## Pins",
        "",
        "| what | value |",
        "|---|---|",
        *[f"| {k} | `{v}` |" for k, v in pins.items()],
        "",
        "## Models and settings",
        "",
        f"Memory system under test: **{system}**{bound} (params `system`; systems/port.py).",
        "",
        regime_line(run),
        "",
        "| role | model | endpoint |",
        "|---|---|---|",
        *[f"| {m.role} | `{m.model}` | {m.api_base or '–'} |" for m in run.models],
        "",
        f"Judge is the agent's model: **{'yes' if run.judge_is_agent else 'no'}**.",
        "",
        *[f"- {k}: {v}" for k, v in settings.items()],
        "",
        "## Scores per ability",
        "",
        f"| ability | n | score | {confidence:.0%} CI | beam_code | excl. known-bad | "
        "evidence recall |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for group in [*ABILITIES, OVERALL]:
        row = scores[group]
        interval = _interval(row)
        out.append(
            f"| {group} | {row.n} | {fmt(row.score)} | {interval} | "
            f"{fmt(row.score_beam_code)} | "
            f"{fmt(row.score_excluding_known_bad)} | {fmt(row.evidence_recall)} |"
        )
    if inputs.record.protocols is not None:
        from bench.protocols.table import protocol_table

        out += ["", *protocol_table(inputs.record.protocols)]
    out += [
        "",
        f"Event ordering: event_f1 {fmt(judge.events.event_f1)}, "
        f"event_tau_norm {fmt(judge.events.event_tau_norm)} (score = F1 × tau_norm).",
        "",
        "Flagged questions: " + ", ".join(f"{k} {v}" for k, v in flags) + ".",
        "",
        "## Questions",
        "",
        "| question | ability | score | flags | evidence recall |",
        "|---|---|---:|---|---:|",
        *[
            f"| {r.question_id} | {r.ability} | {fmt(r.score)} | "
            f"{', '.join(r.flags) or '–'} | {fmt(r.evidence_recall)} |"
            for r in rows
        ],
        "",
        *memory_table(system, ingest),
    ]
    out += [
        "",
        "## Cost",
        "",
        "| phase | calls | tokens | estimated calls | estimated tokens |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {phase} | {fmt(r.calls)} | {fmt(r.tokens)} | "
            f"{fmt(r.estimate_calls)} | {fmt(r.estimate_tokens)} |"
            for phase, r in ((p, cost[p]) for p in (*COST_KEYS, TOTAL))
        ],
        "",
        "Calls and tokens are what these results took, whether made in this run or served from "
        "the call cache (a retried request counts once). The seconds of each phase are in the "
        "metrics of its stage (`dvc metrics show`), never here: a re-run changes no byte of "
        "this record.",
        "",
        "## Ours and the benchmark's code",
        "",
        "Both scores come from the same judge verdicts (no extra model call). What differs:",
        "",
        *[f"- {line}" for line in DIFFERENCES],
        "",
        "Choices of ours that neither score shares with the benchmark's code:",
        "",
        *[f"- {line}" for line in OUR_CHOICES],
        "",
        "## Caveats",
        "",
    ]
    caveats = []
    if run.reads_gold:
        caveats.append(
            f"{system} reads gold evidence by design: its score bounds what the answer model "
            "does with perfect memory; compare memory systems with each other, and each with "
            "this ceiling, never this score with published systems' scores."
        )
    if run.mode == "lite":
        caveats.append(
            "The lite set is a smoke test of the pipeline (2 questions), not a sample: its score "
            "says nothing about memory."
        )
    if run.test_model:
        caveats.append("A test model made this run: it measures nothing.")
    if run.judge_is_agent:
        caveats.append(
            "The judge is the agent's own model, which biases scores upward; set "
            "`models.judge` to another model for a fair score."
        )
    caveats += [
        "Event ordering is scored as event_f1 × event_tau_norm, stricter than the paper's "
        "tau-only number.",
        "Two defects of the benchmark's scorer are corrected: the judge prompt's `<question>` "
        "is filled, and a 0.5 item score is kept (the original `int()` made it 0).",
        f"Intervals are {confidence:.0%} bootstrap intervals over questions: with few questions "
        "they are wide, and abilities whose intervals overlap cannot be told apart.",
        "Traces and graphs quote the chat: they are CC BY-SA 4.0 material (see NOTICE).",
    ]
    out += [f"- {c}" for c in caveats]
    return "\n".join(out) + "\n"


GRAPH_COLUMNS = (
    "chunks",
    "entities",
    "statements",
    "relationships",
    "supersedes",
    "contradicts",
    "empty_extractions",
    "failed_extractions",  # beside the empty ones: "empty 0" must not hide that every call failed
)


def memory_table(system: str, ingest: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The record's table of the memory built per conversation (in conversation order): the
    graph's counts for graphrag, whatever counts a baseline keeps (data/ingest/graphs.json)."""
    rows = sorted(ingest.items(), key=lambda item: _conversation_number(item[0]))
    graph = system == "graphrag"
    columns = list(GRAPH_COLUMNS) if graph else sorted({k for _, c in rows for k in c})
    head = ["## Graph" if graph else f"## Memory ({system})", ""]
    if not columns:
        return [*head, f"{system} keeps no memory of the chat."]
    return [
        *head,
        f"| conversation | {' | '.join(c.replace('_', ' ') for c in columns)} |",
        f"|---|{'---:|' * len(columns)}",
        *[f"| {name} | {' | '.join(fmt(c.get(k)) for k in columns)} |" for name, c in rows],
    ]


def ability_plot(scores: Mapping[str, ScoreRow]) -> str:
    """The data of the score plot (CSV): score per ability asked, with its interval and n."""
    lines = ["ability,score,ci_low,ci_high,n"]
    for ability in ABILITIES:
        row = scores[ability]
        if row.n:
            lines.append(f"{ability},{row.score:.6f},{row.ci_low:.6f},{row.ci_high:.6f},{row.n}")
    return "\n".join(lines) + "\n"


def question_scores(rows: Sequence[JudgedQuestion], questions: Sequence[Question]) -> str:
    """Each question's score (CSV, by question id) and its conversation: what compare pairs
    between two runs that asked the same questions (bench/paired.py)."""
    conversation = {q.id: q.conversation_id for q in questions}
    lines = ["question,conversation,ability,score"]
    lines += [
        f"{r.question_id},{conversation[r.question_id]},{r.ability},{r.score:.6f}"
        for r in sorted(rows, key=attrgetter("question_id"))
    ]
    return "\n".join(lines) + "\n"


def cost_plot(cost: Mapping[str, CostRow]) -> str:
    """The data of the two cost plots (CSV): calls and tokens per phase, an output only (the page
    reads the run's cost from the run record)."""
    lines = ["phase,calls,tokens"]
    lines += [f"{p},{cost[p].calls},{cost[p].tokens}" for p in COST_KEYS]
    return "\n".join(lines) + "\n"


def run_info(ingest: StageRun, answer: StageRun, judge: StageRun) -> RunSummary:
    """The run the three stages made, with the project's small local models named."""
    return summarize_runs(ingest, answer, judge, frozenset(LOCAL_MODELS))
