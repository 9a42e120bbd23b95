"""compare: this repository's experiments side by side (`make compare`).

Reads what `dvc exp show --json` lists and writes `reports/compare.md` (the table and the
paired differences, also printed), `reports/compare.csv` (long format),
`reports/compare_pairs.csv` (each pair of runs that asked the same questions: the mean difference
per ability and overall with its paired bootstrap interval) and `reports/compare.svg` (score per
ability with its interval, score against tokens per question, tokens per phase): one column per
system/model. Each run's per-question scores, build calls and wall time are read from its own
commit (`git show <rev>:metrics/run_record.json`, the report's typed record, whose headline the
table reads; `metrics/questions.csv`, `metrics/usage/ingest.json`,
`metrics/wall_time/answer.json` and `ingest.json`; the workspace's from its files). The cores
are bench/compare.py, whose docstring lists the rows, and bench/paired.py. Not a DVC stage: its
inputs are the experiments themselves.

    python -m commands.compare                    # every finished experiment of HEAD (a sweep)
    python -m commands.compare exp-a exp-b main   # these experiments / branches / commits
    python -m commands.compare --rev v1 ...       # also the experiments of commit v1
    python -m commands.compare --from-json show.json   # a saved `dvc exp show --json`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from bench.compare import (
    Run,
    RunWallTime,
    build_comparison,
    read_exp_show,
    render_csv,
    render_markdown,
    render_svg,
    select_runs,
)
from bench.paired import (
    QuestionScore,
    build_calls_per_conversation,
    paired_differences,
    read_question_scores,
    render_pairs_csv,
    render_pairs_markdown,
)
from clients.files import read_json, write_atomic
from schemas.errors import DataError, ParamsError, ServiceError
from schemas.layout import LAYOUT
from schemas.run_record import RunRecord
from schemas.wall_time import AnswerWallTime, IngestWallTime
from stages.common import read_params, run_stage
from systems.regimes import effective_regime
from systems.registry import system_entry

EXP_SHOW_TIMEOUT_SECONDS = 300
GIT_SHOW_TIMEOUT_SECONDS = 60


def exp_show(revs: list[str], all_commits: bool) -> Any:
    """`dvc exp show --json` of the repository in the working directory."""
    command = [sys.executable, "-m", "dvc", "exp", "show", "--json"]
    command += ["--all-commits"] if all_commits else [f"--rev={rev}" for rev in revs]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=EXP_SHOW_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(
            f"`dvc exp show --json` did not finish in {EXP_SHOW_TIMEOUT_SECONDS} s"
        ) from exc
    if done.returncode != 0:
        raise ServiceError(
            f"`{' '.join(command[2:])}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-600:]}"
        )
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"`dvc exp show --json` printed no JSON ({exc}): {done.stdout[:200]!r}"
        ) from exc


OWN = " (own)"


def regime_of(run: Run) -> str | None:
    """The answer regime a run answered in: params `answer.regime` (native before regimes
    existed), native resolved through its system's entry and marked `(own)`; None where the
    system is not installed here and the regime is native."""
    asked = str(run.params.get("answer.regime") or "native")
    system = run.params.get("system")
    try:
        native = system_entry(str(system)).native_regime if system is not None else None
    except ParamsError:
        native = None
    if native is None:
        return None if asked == "native" else asked
    if asked not in ("native", "one_shot", "agent"):
        return asked
    regime = effective_regime(asked, native)  # type: ignore[arg-type]
    return f"{regime}{OWN}" if regime == native else regime


def bare_regime(label: str | None) -> str | None:
    """The regime without its `(own)` mark: graphrag's own agent and another system's agent
    regime are both the agent loop over their own search, so they pair."""
    return None if label is None else label.removesuffix(OWN)


def run_file(run: Run, path: Path) -> str | None:
    """A file as the run's commit holds it (the workspace: as it is on disk); None when the
    commit has no such file (a run made before the file existed) or git does not know the
    commit (a saved `dvc exp show --json` from elsewhere)."""
    if run.kind == "workspace":
        return path.read_text(encoding="utf-8") if path.is_file() else None
    try:
        done = subprocess.run(
            ["git", "show", f"{run.rev}:{path.as_posix()}"],
            capture_output=True,
            text=True,
            timeout=GIT_SHOW_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(
            f"`git show {run.rev}:{path}` did not finish in {GIT_SHOW_TIMEOUT_SECONDS} s"
        ) from exc
    return done.stdout if done.returncode == 0 else None


def with_run_record(run: Run) -> Run:
    """The run with its run record's headline (`LAYOUT.report.run_record` at its commit, read
    typed). A run whose commit has none (made before the report wrote one, or a saved `dvc exp
    show --json` from elsewhere) keeps DVC's copy of its headline: the same numbers, so the
    fallback costs nothing. A record of another version is a DataError that says to re-run."""
    text = run_file(run, LAYOUT.report.run_record) if run.report is not None else None
    if text is None:
        return run
    try:
        record = RunRecord.model_validate_json(text)
    except ValidationError as exc:
        raise DataError(
            f"{LAYOUT.report.run_record} of {run.name} is not a run record of this version "
            f"({exc.error_count()} error(s), first at "
            f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}): re-run its report "
            "(`dvc exp apply` it, then `dvc repro report`), or leave it out"
        ) from exc
    return run.model_copy(update={"report": record.headline})


def question_scores_of(run: Run) -> dict[str, QuestionScore] | None:
    text = run_file(run, LAYOUT.report.questions)
    source = f"{LAYOUT.report.questions} of {run.name}"
    return None if text is None else read_question_scores(text, source)


def build_calls_of(run: Run, scores: dict[str, QuestionScore] | None) -> float | None:
    if scores is None:  # no questions to count conversations by: the usage is not read
        return None
    text = run_file(run, LAYOUT.ingest.usage)
    if text is None:
        return None
    try:
        usage = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{LAYOUT.ingest.usage} of {run.name} is not JSON: {exc}") from exc
    return build_calls_per_conversation(usage, scores)


W = TypeVar("W", AnswerWallTime, IngestWallTime)


def wall_time_file_of(run: Run, path: Path, record: type[W]) -> W | None:
    """A run's wall-time file, None when its commit has none (a run made before it)."""
    text = run_file(run, path)
    if text is None:
        return None
    try:
        return record.model_validate_json(text)
    except ValidationError as exc:
        raise DataError(f"{path} of {run.name} is not a wall-time file: {exc}") from exc


def wall_time_of(run: Run) -> RunWallTime:
    """What the run's own wall-time files say of its answers and builds (each None when its
    commit has no such file or the file has no such group: a run made before they were timed)."""
    answer = wall_time_file_of(run, LAYOUT.answer.wall_time, AnswerWallTime)
    ingest = wall_time_file_of(run, LAYOUT.ingest.wall_time, IngestWallTime)
    return RunWallTime(
        answer=answer.answer_seconds if answer else None,
        retrieval=answer.retrieval_seconds if answer else None,
        build=ingest.build_seconds if ingest else None,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m commands.compare",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "names",
        nargs="*",
        help="experiments, branches, tags or commits to compare, in this order (default: every "
        "experiment with metrics/report.json)",
    )
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        help="also list the experiments of this commit (repeatable; default HEAD)",
    )
    parser.add_argument("--all-commits", action="store_true", help="experiments of every commit")
    parser.add_argument(
        "--from-json", type=Path, help="a saved `dvc exp show --json` instead of running it"
    )
    parser.add_argument(
        "--across-regimes",
        action="store_true",
        help="pair runs of different answer regimes too (default: like with like only)",
    )
    parser.add_argument(
        "--across-protocols",
        action="store_true",
        help="pair runs of different answer protocols too (answer.protocol; default: like with "
        "like only, as exabase's answerer sees judge-side annotations)",
    )
    parser.add_argument("--out-dir", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)

    document = read_json(args.from_json) if args.from_json else exp_show(args.rev, args.all_commits)
    runs, left_out = select_runs(read_exp_show(document), args.names)
    runs = [with_run_record(run) for run in runs]
    runs = [run.model_copy(update={"regime": regime_of(run)}) for run in runs]
    scores = [question_scores_of(run) for run in runs]
    build_calls = [build_calls_of(run, s) for run, s in zip(runs, scores, strict=True)]
    wall_times = [wall_time_of(run) for run in runs]
    table = build_comparison(runs, left_out, build_calls=build_calls, wall_times=wall_times)
    bootstrap = read_params().report
    regimes = None if args.across_regimes else [bare_regime(run.regime) for run in runs]
    pairing = paired_differences(
        table.columns,
        scores,
        bootstrap,
        regimes,
        upper_bounds=[run.reads_gold for run in runs],
        answer_protocols=None if args.across_protocols else [r.answer_protocol for r in runs],
    )
    markdown = render_markdown(table) + "\n" + render_pairs_markdown(pairing, bootstrap.confidence)
    write_atomic(args.out_dir / "compare.md", markdown)
    write_atomic(args.out_dir / "compare.csv", render_csv(table))
    write_atomic(args.out_dir / "compare_pairs.csv", render_pairs_csv(pairing))
    write_atomic(args.out_dir / "compare.svg", render_svg(table))
    sys.stdout.write(markdown)
    print(
        f"\nwrote {args.out_dir}/compare.md, compare.csv, compare_pairs.csv and compare.svg",
        file=sys.stderr,
    )


if __name__ == "__main__":
    run_stage(lambda: main())
