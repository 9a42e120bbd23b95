"""compare: experiments side by side, one column per system/model, from DVC's own records.

Input is the document `dvc exp show --json` prints (a list of baselines: the workspace and each
commit, with their experiments; every run holds its `params.yaml` and its metrics files). Each
run whose `metrics/report.json` is there becomes a column; its heading is the params `system` (the
memory system), with the agent's model added where the models differ, and the experiment's name
where that still leaves two columns alike. Runs without a report (queued, running, failed) are
listed below the table, never silently dropped.

A run whose headline has `gold.reads` (a system that reads gold evidence by design, systems/port.py
`reads_gold`: the oracle) is labelled `<system> (reads gold)` and explained under the table: it
stays in the table, since the ceiling beside the systems is what a researcher runs it for, but
it is an upper bound, not a memory system, so bench/paired.py leaves it out of the paired "which
system is better" differences (a note says so: the gap to it is read from the table).

Rows, from each run's headline (schemas/headline.py: its run record's, metrics/run_record.json,
where the run's commit has one, else DVC's copy of metrics/report.json; bench/report.py writes
both):
- the runs' settings: system, mode, the agent's and the judge's model, and every other param
  whose value differs between the columns;
- score: overall and each ability any column asked, as `score [ci_low, ci_high]` with its
  number of questions;
- the other scores (beam_code, excluding known-bad rubrics, evidence recall, the judge check);
- cost: tokens and calls per question, the agent's context tokens;
- wall time, from each run's own files (metrics/wall_time/, read by commands/compare.py): the
  questions' answer and retrieval seconds (median, p95) and each conversation's build (median,
  max), as the machine that ran it timed them (not comparable across machines);
- calls and tokens per phase, then failures.
A column without a value shows `–`.

Outputs (written by commands/compare.py): a Markdown table, a long-format CSV (one row per column
and metric: `column,experiment,rev,system,agent_model,group,key,value,ci_low,ci_high,n`), and one
SVG figure drawn with matplotlib: score per ability with its interval, and calls and tokens per
phase, one colour per column. SVG because it is text, opens in any browser and is byte-identical
for the same input (no date, fixed ids); matplotlib because it is the maintained plotting library
that writes a file without a browser or network (DVC's own `plots diff` writes HTML that loads
Vega from the web).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from schemas.base import Record
from schemas.errors import DataError
from schemas.headline import Headline
from schemas.layout import LAYOUT
from schemas.roles import COST_KEYS
from schemas.wall_time import Spread

REPORT_METRICS = str(LAYOUT.report.metrics)
PARAMS_FILE = "params.yaml"
MISSING = "–"
SCORE_GROUPS = ("score_beam_code", "score_excluding_known_bad", "evidence_recall")
COST_GROUPS = ("cost_calls", "cost_tokens")
SHARE_GROUPS = ("score", *SCORE_GROUPS)
"""Groups whose values are scores or shares (0..1)."""
SETTING_PARAMS = ("system", "tier", "mode", "models.agent.model", "models.judge.model")
"""Params shown at the top of every table; other params only where the columns differ."""
UNCOMPARED_PARAMS = ("models.", "release.", "fetch.", "judge.", "estimate.")
"""Params left out of the "differs" rows: pins and endpoints, not what a sweep varies (the
models' names are shown above; `api_base` and pins would only repeat it)."""

UNFINISHED = ("queued", "running", "failed")
"""Executor states of an experiment that has no commit of its own (`dvc exp show` then shows the
workspace's params and metrics in its row)."""

Kind = Literal["workspace", "baseline", "experiment"]
READS_GOLD = "(reads gold)"
ANNOTATED = "(answer.protocol exabase)"
"""After the label of a column whose system read gold evidence."""


class Run(Record):
    """One row of `dvc exp show`: the workspace, a commit, or an experiment of a commit."""

    name: str
    """The experiment's name, a branch or tag name, the short commit, or `workspace`."""
    rev: str
    kind: Kind
    state: str | None = None
    """DVC's state of an experiment (Success, Failed, Queued, Running); None for commits."""
    params: dict[str, Any]
    """params.yaml, flattened to dotted keys."""
    report: Headline | None
    """The run's headline: its run record's (commands/compare.py reads it from the run's commit),
    else DVC's copy of metrics/report.json; None when the run has none (not run, failed, still
    queued)."""
    regime: str | None = None
    """The answer regime it answered in (params `answer.regime` with native resolved to the
    system's own: `one_shot` or `agent`; commands/compare.py), `(own)` marked; None: unknown."""

    @property
    def reads_gold(self) -> bool:
        """Its system read gold evidence by design (`gold.reads` in its headline): an upper
        bound, not a memory system's score."""
        return self.report is not None and bool(self.report.gold.get("reads"))

    @property
    def answer_protocol(self) -> str:
        """What its answerer was given with each question (params `answer.protocol`; a run made
        before it: `beam`, the question alone; `exabase`: judge-side annotations)."""
        return str(self.params.get("answer.protocol") or "beam")


class RunWallTime(Record):
    """A run's wall time as its own files hold it (None: a run made before it was timed)."""

    answer: Spread | None = None
    """Over the questions: the system's whole answer."""
    retrieval: Spread | None = None
    """Over the questions whose system timed its searches."""
    build: Spread | None = None
    """Over the conversations: building each one's memory."""


WALL_TIME_SECTION = "wall time (seconds on the machine that ran it)"
WALL_TIME_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("answer", "median", "answer_seconds_median", "answer per question, median"),
    ("answer", "p95", "answer_seconds_p95", "answer per question, p95"),
    ("retrieval", "median", "retrieval_seconds_median", "retrieval per question, median"),
    ("retrieval", "p95", "retrieval_seconds_p95", "retrieval per question, p95"),
    ("build", "median", "build_seconds_median", "build per conversation, median"),
    ("build", "max", "build_seconds_max", "build per conversation, max"),
)
"""(RunWallTime field, Spread field, row key, row label) of each wall-time row."""


class Cell(Record):
    value: float | str | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: float | None = None


class Row(Record):
    section: str
    group: str
    """The report's group (`score`, `cost_tokens`, ...) or `params` / `derived`."""
    key: str
    label: str
    cells: tuple[Cell, ...]


class SeedSpread(Record):
    """Runs that differ only in `llm.seed`: the spread of their overall score beside the
    interval over questions of each (how much a re-run moves the score, against how much the
    questions do)."""

    columns: tuple[str, ...]
    seeds: tuple[str, ...]
    scores: tuple[float, ...]
    mean: float
    low: float
    high: float
    stdev: float
    """The sample standard deviation across the seeds."""
    interval_width: float | None
    """The mean width of the runs' own bootstrap intervals (None where a run has none)."""


class Comparison(Record):
    columns: tuple[str, ...]
    runs: tuple[Run, ...]
    rows: tuple[Row, ...]
    left_out: tuple[str, ...]
    """Runs shown by DVC but without a report, with why (`name (Failed)`)."""
    seed_spreads: tuple[SeedSpread, ...] = ()


# -- reading `dvc exp show --json` -----------------------------------------------------------------
def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= flatten(value, f"{prefix}{key}.")
        return out
    return {prefix[:-1]: node}


def _file_data(files: Any, name: str) -> Any:
    entry = (files or {}).get(name) or {}
    return entry.get("data") if isinstance(entry, Mapping) else None


def _run(entry: Mapping[str, Any], kind: Kind, state: str | None, name: str | None) -> Run:
    data = entry.get("data") or {}
    rev = str(entry.get("rev") or data.get("rev") or "")
    report = _file_data(data.get("metrics"), REPORT_METRICS)
    label = name or entry.get("name") or rev[:7] or "?"
    return Run(
        name=label,
        rev=rev,
        kind=kind,
        state=state,
        params=flatten(_file_data(data.get("params"), PARAMS_FILE) or {}),
        report=None if report is None else read_headline(report, label),
    )


def read_headline(report: Any, run: str) -> Headline:
    """A run's metrics/report.json as DVC shows it, typed; a DataError naming the run where it is
    not this version's headline (a run made before a group was renamed or dropped)."""
    try:
        return Headline.model_validate(report)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise DataError(
            f"{REPORT_METRICS} of {run} is not this version's headline ({where}: {first['msg']}): "
            "re-run its report (`dvc exp apply` it, then `dvc repro report`), or leave it out"
        ) from exc


def read_exp_show(document: Any) -> list[Run]:
    """Every run of a `dvc exp show --json` document: each commit, then its experiments, oldest
    first."""
    if not isinstance(document, list):
        raise DataError(
            "expected the output of `dvc exp show --json` (a JSON list of baselines), found "
            f"{type(document).__name__}"
        )
    runs: list[Run] = []
    for baseline in document:
        if not isinstance(baseline, Mapping):
            raise DataError("a `dvc exp show --json` entry is not an object")
        rev = str(baseline.get("rev") or "")
        kind: Kind = "workspace" if rev == "workspace" else "baseline"
        runs.append(_run(baseline, kind, None, "workspace" if kind == "workspace" else None))
        # DVC lists a commit's experiments newest first; a sweep reads best in its queue order
        for experiment in reversed(baseline.get("experiments") or []):
            for entry in experiment.get("revs") or []:
                executor = experiment.get("executor") or {}
                state = executor.get("state")  # queued, running, success, failed; None: done
                run = _run(entry, "experiment", state, experiment.get("name"))
                if state in UNFINISHED:  # DVC shows the workspace's files for these
                    run = run.model_copy(update={"report": None})
                runs.append(run)
    return runs


# -- choosing the columns ----------------------------------------------------------------------
def select_runs(runs: Sequence[Run], names: Sequence[str] = ()) -> tuple[list[Run], list[str]]:
    """The runs to compare and the left-out ones (`name (state)`).

    With names: those runs, in that order (an experiment's name, a branch or tag, a commit or its
    prefix, `workspace`); each must exist and have a report. Without: every experiment that has a
    report (a sweep's columns); the commits only when no experiment has one."""
    if names:
        chosen = [_find(runs, name) for name in names]
        missing = [f"{r.name} ({_why(r)})" for r in chosen if r.report is None]
        if missing:
            raise DataError(
                f"no {REPORT_METRICS} for {', '.join(missing)}: run it to the end first "
                "(`dvc queue status`, `dvc exp run`)"
            )
        return chosen, []
    experiments = [r for r in runs if r.kind == "experiment"]
    pool = experiments if any(r.report is not None for r in experiments) else list(runs)
    chosen = _unique([r for r in pool if r.report is not None])
    left_out = [f"{r.name} ({_why(r)})" for r in experiments if r.report is None]
    if not chosen:
        listed = ", ".join(f"{r.name} ({_why(r)})" for r in runs) or "none"
        raise DataError(
            f"nothing to compare: no experiment or commit has {REPORT_METRICS} (runs: {listed}). "
            "Run a sweep first, e.g. `dvc exp run --queue -S system=graphrag,rag,full_context,"
            "no_memory` and `dvc queue start -j 2`, then wait for `dvc queue status`"
        )
    return chosen, left_out


def _why(run: Run) -> str:
    if run.report is not None:
        return "done"
    return run.state or ("not run" if run.kind != "experiment" else "no report")


def _unique(runs: Sequence[Run]) -> list[Run]:
    """The workspace repeats the commit it was last run at: leave it out where a commit has the
    same params and report."""

    def same(a: Run, b: Run) -> bool:
        return a.params == b.params and a.report == b.report

    return [
        r for r in runs if r.kind != "workspace" or not any(o is not r and same(o, r) for o in runs)
    ]


def _find(runs: Sequence[Run], name: str) -> Run:
    exact = [r for r in runs if name in (r.name, r.rev)]
    prefix = [r for r in runs if len(name) >= 4 and r.rev.startswith(name)]
    found = exact or prefix
    if len(found) != 1:
        known = ", ".join(r.name for r in runs) or "none"
        what = "is ambiguous" if found else "is not an experiment or commit DVC shows"
        raise DataError(
            f"{name!r} {what} (known: {known}); name a commit of another branch with --rev"
        )
    return found[0]


# -- the table ---------------------------------------------------------------------------------
def column_labels(runs: Sequence[Run]) -> list[str]:
    """`system`, `system · model` where the agent models differ, `· regime` where the answer
    regimes differ; the experiment's name where that leaves two columns alike (or there is no
    system param); ` (reads gold)` after a run that read gold evidence, ` (answer.protocol
    exabase)` after one whose answerer saw judge-side annotations."""
    systems = [r.params.get("system") for r in runs]
    models = [str(r.params.get("models.agent.model")) for r in runs]
    regimes = [r.regime for r in runs]
    labels = []
    for run, system, model in zip(runs, systems, models, strict=True):
        parts = [str(system)] if system is not None else []
        if len(set(models)) > 1:
            parts.append(model)
        if len(set(regimes)) > 1 and run.regime is not None:
            parts.append(run.regime)
        label = " · ".join(parts) or run.name
        label = f"{label} {READS_GOLD}" if run.reads_gold else label
        labels.append(f"{label} {ANNOTATED}" if run.answer_protocol != "beam" else label)
    return [
        f"{label} ({run.name})" if labels.count(label) > 1 else label
        for label, run in zip(labels, runs, strict=True)
    ]


def _value(run: Run, group: str, key: str) -> float | None:
    value = run.report.group(group).get(key) if run.report is not None else None
    return float(value) if isinstance(value, int | float) else None


def _row(section: str, group: str, key: str, label: str, runs: Sequence[Run]) -> Row:
    return Row(
        section=section,
        group=group,
        key=key,
        label=label,
        cells=tuple(Cell(value=_value(r, group, key)) for r in runs),
    )


def _keys(runs: Sequence[Run], group: str, first: Sequence[str] = ()) -> list[str]:
    present = {k for r in runs if r.report is not None for k in r.report.group(group)}
    rest = sorted(present - {*first, "total"})
    return [k for k in first if k in present] + rest + (["total"] if "total" in present else [])


def _per_question(run: Run, group: str) -> float | None:
    total, questions = _value(run, group, "total"), _value(run, "questions", "overall")
    return total / questions if total is not None and questions else None


def settings_rows(runs: Sequence[Run]) -> list[Row]:
    rows = [
        Row(
            section="settings",
            group="params",
            key="regime",
            label="answer regime",
            cells=tuple(Cell(value=r.regime or MISSING) for r in runs),
        )
    ]
    for key in SETTING_PARAMS:
        values = [r.params.get(key) for r in runs]
        if key == "models.judge.model":
            values = [v if v is not None else "= agent" for v in values]
        if key == "system" and all(v is None for v in values):
            continue
        rows.append(
            Row(
                section="settings",
                group="params",
                key=key,
                label=key.removeprefix("models.").replace(".model", " model"),
                cells=tuple(Cell(value=MISSING if v is None else str(v)) for v in values),
            )
        )
    keys = sorted({k for r in runs for k in r.params})
    for key in keys:
        if key in SETTING_PARAMS or key.startswith(UNCOMPARED_PARAMS):
            continue
        values = [r.params.get(key) for r in runs]
        if len({repr(v) for v in values}) > 1:
            rows.append(
                Row(
                    section="settings",
                    group="params",
                    key=key,
                    label=key,
                    cells=tuple(Cell(value=MISSING if v is None else str(v)) for v in values),
                )
            )
    return rows


def score_rows(runs: Sequence[Run]) -> list[Row]:
    rows = []
    for key in _keys(runs, "score", first=("overall",)):
        cells = []
        for run in runs:
            n = _value(run, "questions", key)
            cells.append(
                Cell(
                    value=_value(run, "score", key),
                    ci_low=_value(run, "score_ci_low", key),
                    ci_high=_value(run, "score_ci_high", key),
                    n=n,
                )
            )
        rows.append(Row(section="score", group="score", key=key, label=key, cells=tuple(cells)))
    return rows


def wall_time_rows(wall_times: Sequence[RunWallTime | None]) -> list[Row]:
    """The wall-time rows: a run without a value (not timed, no such file) shows `–`."""

    def value(timed: RunWallTime | None, what: str, statistic: str) -> float | None:
        found = getattr(timed, what, None) if timed is not None else None
        return getattr(found, statistic) if isinstance(found, Spread) else None

    return [
        Row(
            section=WALL_TIME_SECTION,
            group="wall_time",
            key=key,
            label=label,
            cells=tuple(Cell(value=value(t, what, statistic)) for t in wall_times),
        )
        for what, statistic, key, label in WALL_TIME_ROWS
    ]


def build_comparison(
    runs: Sequence[Run],
    left_out: Sequence[str] = (),
    *,
    build_calls: Sequence[float | None] | None = None,
    wall_times: Sequence[RunWallTime | None] | None = None,
) -> Comparison:
    """The table of the chosen runs (pure); `build_calls`: each run's model calls to build its
    memory per conversation (bench/paired.py), a cost row beside tokens per question;
    `wall_times`: each run's wall time, rows after the cost."""
    if not runs:
        raise DataError("nothing to compare: no run was chosen")
    if build_calls is not None and len(build_calls) != len(runs):
        raise ValueError("one build_calls value (or None) per run")
    if wall_times is not None and len(wall_times) != len(runs):
        raise ValueError("one wall_times value (or None) per run")
    rows = [*settings_rows(runs), *score_rows(runs)]
    for group in SCORE_GROUPS:
        rows += [_row("other scores", group, k, f"{group}.{k}", runs) for k in _keys(runs, group)]
    rows += [
        _row("other scores", "judge_check", k, f"judge_check.{k}", runs)
        for k in _keys(runs, "judge_check")
    ]
    for group, label in (
        ("cost_tokens", "tokens per question"),
        ("cost_calls", "calls per question"),
    ):
        rows.append(
            Row(
                section="cost",
                group="derived",
                key=f"{group}_per_question",
                label=label,
                cells=tuple(Cell(value=_per_question(r, group)) for r in runs),
            )
        )
    if build_calls is not None:
        rows.append(
            Row(
                section="cost",
                group="derived",
                key="build_calls_per_conversation",
                label="build calls per conversation",
                cells=tuple(Cell(value=v) for v in build_calls),
            )
        )
    rows += [_row("cost", "agent", k, f"agent.{k}", runs) for k in _keys(runs, "agent")]
    rows += wall_time_rows(wall_times) if wall_times is not None else []
    for group, section in (("cost_calls", "calls per phase"), ("cost_tokens", "tokens per phase")):
        rows += [_row(section, group, k, k, runs) for k in _keys(runs, group, first=COST_KEYS)]
    rows += [_row("failures", "failures", k, k, runs) for k in _keys(runs, "failures")]
    rows += [  # per ability: beside each score
        _row("questions", "questions", k, k, runs)
        for k in _keys(runs, "questions")
        if k in ("overall", "known_bad_rubric")
    ]
    columns = tuple(column_labels(runs))
    return Comparison(
        columns=columns,
        runs=tuple(runs),
        rows=tuple(rows),
        left_out=tuple(left_out),
        seed_spreads=tuple(seed_spreads(runs, columns)),
    )


SEED_PARAM = "llm.seed"


def seed_spreads(runs: Sequence[Run], columns: Sequence[str]) -> list[SeedSpread]:
    """Each set of two or more runs whose params differ only in `llm.seed` (a seed sweep: `dvc
    exp run --queue -S llm.seed=0,1,2`), with its overall scores' spread, in column order."""
    groups: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        if _value(run, "score", "overall") is None:
            continue
        rest = {k: v for k, v in run.params.items() if k != SEED_PARAM}
        groups.setdefault(repr(sorted(rest.items(), key=lambda kv: kv[0])), []).append(index)
    spreads = []
    for members in groups.values():
        seeds = [str(runs[i].params.get(SEED_PARAM)) for i in members]
        if len(set(seeds)) < 2:
            continue
        scores = [_value(runs[i], "score", "overall") or 0.0 for i in members]
        widths = [
            high - low
            for i in members
            if (low := _value(runs[i], "score_ci_low", "overall")) is not None
            and (high := _value(runs[i], "score_ci_high", "overall")) is not None
        ]
        spreads.append(
            SeedSpread(
                columns=tuple(columns[i] for i in members),
                seeds=tuple(seeds),
                scores=tuple(scores),
                mean=statistics.fmean(scores),
                low=min(scores),
                high=max(scores),
                stdev=statistics.stdev(scores),
                interval_width=(statistics.fmean(widths) if len(widths) == len(members) else None),
            )
        )
    return spreads


def render_seed_spreads(spreads: Sequence[SeedSpread]) -> list[str]:
    """The Markdown section of the seed spreads (none: nothing)."""
    if not spreads:
        return []
    lines = [
        "",
        "## Spread across seeds",
        "",
        "Runs that differ only in `llm.seed`: the overall score of each seed, its range and "
        "standard deviation across seeds, beside the mean width of the runs' own intervals over "
        "questions (a seed spread near that width means a re-run moves the score as much as the "
        "choice of questions does).",
        "",
        "| runs | seeds | scores | mean | range | stdev | interval width |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for spread in spreads:
        width = MISSING if spread.interval_width is None else f"{spread.interval_width:.3f}"
        lines.append(
            f"| {_md_escape(', '.join(spread.columns))} | {', '.join(spread.seeds)} | "
            f"{', '.join(f'{x:.3f}' for x in spread.scores)} | {spread.mean:.3f} | "
            f"{spread.low:.3f}–{spread.high:.3f} | {spread.stdev:.3f} | {width} |"
        )
    return lines


# -- rendering ---------------------------------------------------------------------------------
def format_number(value: float, group: str, key: str = "") -> str:
    """Scores and shares with 3 decimals; counts with thousands separators; seconds with three
    significant digits below 10 (a BM25 search takes well under a millisecond)."""
    if group in SHARE_GROUPS or (group, key) == ("judge_check", "agreement"):
        return f"{value:.3f}"
    if group == "wall_time":
        return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def format_cell(cell: Cell, group: str, key: str = "") -> str:
    if cell.value is None:
        return MISSING
    if isinstance(cell.value, str):
        return cell.value
    text = format_number(cell.value, group, key)
    if group == "score":
        if cell.ci_low is not None and cell.ci_high is not None:
            text += f" [{cell.ci_low:.2f}, {cell.ci_high:.2f}]"
        if cell.n is not None:
            text += f" (n={int(cell.n)})"
    return text


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(table: Comparison) -> str:
    head = ["metric", *table.columns]
    lines = [
        "# Experiments side by side",
        "",
        f"{len(table.columns)} runs from `dvc exp show` (`python -m commands.compare`). Scores "
        "are `score [95% interval] (n=questions)`; an ability a run did not ask shows "
        f"`{MISSING}`. A run with the test model `scripted/rules` measures nothing. Wall time "
        "is as each run's machine timed it (other jobs beside it; answers from the call cache "
        "are fast): compare it between runs of one machine only.",
        "",
        "| " + " | ".join(map(_md_escape, head)) + " |",
        "|" + "---|" + "---:|" * len(table.columns),
    ]
    section = None
    for row in table.rows:
        if row.section != section:
            section = row.section
            lines.append(f"| **{section}** |" + " |" * len(table.columns))
        cells = [format_cell(c, row.group, row.key) for c in row.cells]
        lines.append("| " + " | ".join(_md_escape(x) for x in [row.label, *cells]) + " |")
    lines.append("")
    lines.append(
        "Columns: "
        + "; ".join(
            f"{label} = `{run.name}` ({run.rev[:7]})"
            for label, run in zip(table.columns, table.runs, strict=True)
        )
        + "."
    )
    bounds = [c for c, r in zip(table.columns, table.runs, strict=True) if r.reads_gold]
    if bounds:
        lines.append("")
        lines.append(
            f"{', '.join(bounds)}: reads gold evidence by design (each question's cited "
            "messages): an upper bound on the answer model with perfect memory, not a memory "
            "system's score; not paired with the systems below."
        )
    annotated = [
        c for c, r in zip(table.columns, table.runs, strict=True) if r.answer_protocol != "beam"
    ]
    if annotated:
        lines.append("")
        lines.append(
            f"{', '.join(annotated)}: the answerer saw judge-side annotations (ExaBase's answer "
            "protocol, answer.protocol exabase); paired only with runs of the same protocol "
            "unless --across-protocols."
        )
    if table.left_out:
        lines.append("")
        lines.append("Left out (no report): " + ", ".join(table.left_out) + ".")
    lines += render_seed_spreads(table.seed_spreads)
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "column",
    "experiment",
    "rev",
    "system",
    "agent_model",
    "group",
    "key",
    "value",
    "ci_low",
    "ci_high",
    "n",
)


def _csv_number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(round(value, 6))


def render_csv(table: Comparison) -> str:
    """Long format: one row per column and metric (settings rows as text values)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for row in table.rows:
        for label, run, cell in zip(table.columns, table.runs, row.cells, strict=True):
            value = cell.value
            writer.writerow(
                [
                    label,
                    run.name,
                    run.rev,
                    run.params.get("system") or "",
                    run.params.get("models.agent.model") or "",
                    row.group,
                    row.key,
                    value if isinstance(value, str) else _csv_number(value),
                    _csv_number(cell.ci_low),
                    _csv_number(cell.ci_high),
                    _csv_number(cell.n),
                ]
            )
    return buffer.getvalue()


def render_svg(table: Comparison) -> bytes:
    """Score per ability with its interval; the overall score against tokens per question (the
    cost–quality view) and against the answer model's context (95th percentile of its largest
    prompt per question: the matched-budget view, the runs of one system and regime joined, so a
    `top_k` sweep draws a curve per system); tokens per phase. One colour per column."""
    import matplotlib
    from matplotlib.figure import Figure

    scores = [r for r in table.rows if r.group == "score"]
    tokens = [r for r in table.rows if r.group == "cost_tokens" and r.key != "total"]
    n_cols = len(table.columns)
    height = max(4.0, 0.22 * max(len(scores), len(tokens)) * n_cols + 1.8)
    with matplotlib.rc_context({"svg.hashsalt": "beam-compare", "svg.fonttype": "none"}):
        figure = Figure(figsize=(20, height), layout="constrained")
        axes = figure.subplots(1, 4, width_ratios=(1.3, 1, 1, 1))
        colours = [matplotlib.colormaps["tab10"](i % 10) for i in range(n_cols)]
        _bars(axes[0], scores, table.columns, colours, "score (95% interval)", interval=True)
        axes[0].set_xlim(0, 1)
        per_question = _find_row(table, "derived", "cost_tokens_per_question")
        _score_against(axes[1], table, colours, per_question, COST_VIEW)
        context = _find_row(table, "agent", "context_tokens_p95")
        _score_against(axes[2], table, colours, context, BUDGET_VIEW, join=True)
        _bars(axes[3], tokens, table.columns, colours, "tokens per phase")
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="outside lower center", ncols=min(n_cols, 4))
        _freeze_layout(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _bars(
    ax: Any,
    rows: Sequence[Row],
    columns: Sequence[str],
    colours: Sequence[Any],
    title: str,
    *,
    interval: bool = False,
) -> None:
    n_cols = len(columns)
    width = 0.8 / max(n_cols, 1)
    for i, (label, colour) in enumerate(zip(columns, colours, strict=True)):
        ys = [k - 0.4 + width * (i + 0.5) for k in range(len(rows))]  # column 0 on top
        values = [_plain(r.cells[i].value) for r in rows]
        ax.barh(ys, values, height=width, color=colour, label=label)
        if interval:
            for y, row in zip(ys, rows, strict=True):
                cell = row.cells[i]
                value = _plain(cell.value)
                if cell.ci_low is not None and cell.ci_high is not None:
                    ax.errorbar(
                        value,
                        y,
                        xerr=[[max(value - cell.ci_low, 0)], [max(cell.ci_high - value, 0)]],
                        fmt="none",
                        ecolor="black",
                        elinewidth=1,
                        capsize=3,
                    )
    ax.set_yticks(range(len(rows)), [r.label for r in rows])
    ax.invert_yaxis()
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(left=0)


class ScoreView(Record):
    title: str
    xlabel: str


COST_VIEW = ScoreView(title="score against cost", xlabel="tokens per question (every phase)")
BUDGET_VIEW = ScoreView(
    title="score against context",
    xlabel="answer model's context per question (p95 tokens)",
)


def _find_row(table: Comparison, group: str, key: str) -> Row | None:
    return next((r for r in table.rows if (r.group, r.key) == (group, key)), None)


def _series(table: Comparison) -> list[list[int]]:
    """Columns of one system and answer regime (a sweep of its budget), in column order."""
    groups: dict[tuple[object, object], list[int]] = {}
    for i, run in enumerate(table.runs):
        groups.setdefault((run.params.get("system"), run.regime), []).append(i)
    return list(groups.values())


def _score_against(
    ax: Any,
    table: Comparison,
    colours: Sequence[Any],
    xs: Row | None,
    view: ScoreView,
    *,
    join: bool = False,
) -> None:
    """Each column's overall score (with its interval) at its value in `xs`; with `join`, the
    columns of one system and regime joined by a line in the order of x."""
    widest = 0.0
    overall = _find_row(table, "score", "overall")
    points: dict[int, tuple[float, float]] = {}
    if overall is not None and xs is not None:
        for i, colour in enumerate(colours):
            score, x = overall.cells[i], xs.cells[i].value
            if not isinstance(score.value, float) or not isinstance(x, float | int):
                continue
            points[i] = (float(x), score.value)
            low = score.ci_low if score.ci_low is not None else score.value
            high = score.ci_high if score.ci_high is not None else score.value
            widest = max(widest, float(x))
            ax.errorbar(
                x,
                score.value,
                yerr=[[max(score.value - low, 0)], [max(high - score.value, 0)]],
                fmt="o",
                color=colour,
                ecolor=colour,
                capsize=3,
            )
            ax.annotate(
                table.columns[i],
                (x, score.value),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=8,
            )
    if join:
        for members in _series(table):
            line = sorted(points[i] for i in members if i in points)
            if len(line) > 1:
                ax.plot(*zip(*line, strict=True), color="grey", linewidth=1, zorder=0)
    ax.set_xlabel(view.xlabel)
    ax.set_ylabel("overall score (95% interval)")
    ax.set_ylim(0, 1)
    ax.set_xlim(0, widest * 1.25 or 1.0)  # room for the rightmost point's label
    ax.set_title(view.title)
    ax.grid(alpha=0.3)


def _plain(value: float | str | None) -> float:
    return value if isinstance(value, float) and math.isfinite(value) else 0.0


def _freeze_layout(figure: Any) -> None:
    """Lay the figure out once and round the axes' places: the constrained layout's last digits
    vary from draw to draw, and the SVG's clip ids hash them (the same input, other bytes)."""
    figure.get_layout_engine().execute(figure)
    figure.set_layout_engine("none")
    for ax in figure.axes:
        ax.set_position([round(v, 4) for v in ax.get_position().bounds])
