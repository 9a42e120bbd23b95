"""merge: runs of disjoint conversations of one configuration (a split run) as one run.

Each part is the folder of a finished run (its data/, metrics/usage/, params.yaml, pins.yaml and
dvc.lock: a clone's workspace, or `dvc exp apply` of a pulled experiment copied aside). The merge
refuses parts whose params (but `slice.conversations`), pins, code (dvc.lock's code deps), models
(each stage's run.json) or judge check differ from one another, or from this checkout's params and
pins, and parts that share a conversation. It then writes the merged run's data/slice,
data/ingest, data/answer, data/judge, data/judge_check, data/scorer, metrics/usage/ and
metrics/slice.json into this checkout (the cores: bench/merge.py) and runs the report stage on
them (`python -m stages.report`): reports/memory.md, metrics/report.json, the plots and the run's
page are those of one run of all the parts' conversations. Not a DVC stage: its inputs are other
runs.

    python -m commands.merge parts/a parts/b       # README "Beyond one machine"
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.data_check import Finding
from bench.merge import (
    check_disjoint,
    check_questions,
    check_same,
    in_order,
    merge_answer_summary,
    merge_findings,
    merge_judge_summary,
    merge_leak_checks,
    merge_memory_sizes,
    merge_slice_sizes,
    merge_source,
    merge_usage,
    without_split,
)
from clients.files import (
    UMASK,
    read_json,
    read_jsonl,
    read_record,
    read_records,
    remove_outputs,
    write_json,
    write_jsonl,
)
from schemas.errors import DataError
from schemas.judging import JudgedQuestion, Judgement, JudgeSummary
from schemas.layout import DATA, LAYOUT, METRICS, USAGE, usage_file
from schemas.leak_check import LeakCheck
from schemas.params import Params
from schemas.protocols import ProtocolQuestion, ProtocolsSummary
from schemas.records import Question, Rubric, SliceSource
from schemas.runs import MemorySizes, StageRun
from schemas.traces import Trace
from stages.common import PARAMS_FILE, PINS_FILE, load_fixture, read_params, run_stage

MERGED = (
    LAYOUT.slice.folder,
    LAYOUT.ingest.folder,
    LAYOUT.answer.folder,
    LAYOUT.judge.folder,
    LAYOUT.judge_check.folder,
    LAYOUT.fetch.scorer,
    USAGE,
    LAYOUT.slice.metrics,
)
"""What the merge writes into this checkout: every input of the report (and slice's metric)."""
SUMMED_USAGE = ("ingest", "answer", "judge")
"""Stages whose calls are per question or per conversation; judge_check's are per configuration."""


def read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise DataError(f"{path} is missing: a part is the folder of a finished run") from exc


def code_deps(lock: Any) -> dict[str, Any]:
    """Per stage of a dvc.lock, what it ran on but the data: its code and pinned files' hashes
    and its params but `slice.conversations`."""
    locked = lock.get("stages", {}) if isinstance(lock, dict) else {}
    return {
        name: {
            "deps": {
                d["path"]: d.get("md5")
                for d in stage.get("deps", [])
                if Path(d["path"]).parts[0] not in (DATA.name, METRICS.name)
            },
            "params": {
                file: without_split(_nested(values))
                for file, values in stage.get("params", {}).items()
            },
        }
        for name, stage in locked.items()
    }


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """dvc.lock's dotted param keys as nested sections (so `slice.conversations` drops out)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, name = key.split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return nested


def folder_files(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*")) if p.is_file()}


def check_configuration(parts: Sequence[Path]) -> None:
    """DataError naming the first difference between the parts' configurations, or between
    theirs and this checkout's params and pins (whose report code the merge runs)."""
    names = {str(p): p for p in parts}
    here = {"this checkout": Path("."), **names}
    check_same(
        "params (params.yaml but slice.conversations)",
        {n: without_split(read_yaml(p / PARAMS_FILE)) for n, p in here.items()},
    )
    check_same("pins (pins.yaml)", {n: read_yaml(p / PINS_FILE) for n, p in here.items()})
    check_same(
        "code and params of each stage (dvc.lock but data and slice.conversations)",
        {n: code_deps(read_yaml(p / "dvc.lock")) for n, p in names.items()},
    )
    for files in (LAYOUT.ingest, LAYOUT.answer, LAYOUT.judge, LAYOUT.judge_check):
        check_same(
            f"models and system ({files.run})",
            {n: read_json(p / files.run) for n, p in names.items()},
        )
    for shared in (LAYOUT.judge_check.folder, LAYOUT.fetch.scorer):
        check_same(
            f"{shared} (one per configuration)",
            {
                n: {k: f.read_bytes() for k, f in folder_files(p / shared).items()}
                for n, p in names.items()
            },
        )
    check_same(
        f"judge check usage ({usage_file('judge_check')})",
        {n: read_json(p / usage_file("judge_check")) for n, p in names.items()},
    )


def conversations_of(part: Path) -> list[str]:
    return [
        p.stem.removeprefix("conv") for p in sorted((part / LAYOUT.slice.chats).glob("conv*.json"))
    ]


def copy_rest(parts: Sequence[Path], folder: Path, merged: set[str], out: Path) -> None:
    """Every file of the parts' `folder` but the `merged` ones into `out`: per-conversation
    files side by side; a file two parts hold must be the same (a DataError names it)."""
    taken: dict[str, Path] = {}
    for part in parts:
        for rel, path in folder_files(part / folder).items():
            if rel in merged:
                continue
            if rel in taken:
                if not filecmp.cmp(taken[rel], path, shallow=False):
                    raise DataError(
                        f"{folder / rel} differs between {taken[rel]} and {path}: a file of "
                        "every part must be the same, or be merged (commands/merge.py)"
                    )
                continue
            taken[rel] = path
            target = out / folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def write_merged(parts: Sequence[Path], out: Path) -> list[str]:
    """The merged run's report inputs under `out` (paths as LAYOUT names them); its
    conversations, in the mode's order."""
    run = read_params()
    pin = load_fixture(Path(run.fixture)).modes[run.mode]
    order = pin.question_ids
    held = {str(p): conversations_of(p) for p in parts}
    check_disjoint(held)
    every = {c for cs in held.values() for c in cs}
    conversations = [c for c in pin.conversations if c in every]
    if len(conversations) != len(every):
        raise DataError(
            f"conversations {sorted(every - set(conversations))} are not in mode {run.mode}"
        )

    def records(path: Path, model: Any) -> list[Any]:
        return [r for p in parts for r in read_records(p / path, model)]

    s, i, a, j = LAYOUT.slice, LAYOUT.ingest, LAYOUT.answer, LAYOUT.judge
    questions = in_order(records(s.questions, Question), lambda q: q.id, order)
    rubrics = in_order(records(s.rubrics, Rubric), lambda r: r.question_id, order)
    check_questions(questions, rubrics)
    traces = in_order(records(a.traces, Trace), lambda t: t.question_id, order)
    judgements = in_order(records(j.judgements, Judgement), lambda x: x.question_id, order)
    rows = in_order(records(j.questions, JudgedQuestion), lambda r: r.question_id, order)
    for what, got in (("traces", traces), ("judgements", judgements), ("judged rows", rows)):
        if [x.question_id for x in got] != [q.id for q in questions]:
            raise DataError(f"the parts' {what} are not one per question of their slices")

    copy_rest(
        parts,
        s.folder,
        {"questions.jsonl", "rubrics.jsonl", "sizes.json", "source.json", "findings.jsonl"},
        out,
    )
    write_jsonl(out / s.questions, questions)
    write_jsonl(out / s.rubrics, rubrics)
    write_json(out / s.sizes, merge_slice_sizes([read_json(p / s.sizes) for p in parts]))
    sources = [read_record(p / s.source, SliceSource) for p in parts]
    write_json(out / s.source, merge_source(sources, conversations).model_dump(mode="json"))
    findings = [read_jsonl(p / s.findings, Finding) for p in parts]
    write_jsonl(out / s.findings, merge_findings(findings, conversations))
    tokens = sum(int(read_json(p / s.metrics)["chat"]["tokens"]) for p in parts)
    write_json(out / s.metrics, {"chat": {"tokens": tokens}})

    copy_rest(parts, i.folder, {"graphs.json"}, out)
    sizes = merge_memory_sizes([MemorySizes.from_json(read_json(p / i.graphs)) for p in parts])
    write_json(out / i.graphs, sizes.to_json())

    copy_rest(parts, a.folder, {"traces.jsonl", "leak_check.json", "summary.json"}, out)
    write_jsonl(out / a.traces, traces)
    leaks = merge_leak_checks([read_record(p / a.leak_check, LeakCheck) for p in parts])
    write_json(out / a.leak_check, leaks.model_dump(mode="json"))
    write_json(out / a.summary, merge_answer_summary(traces).to_json())

    protocol_files = {j.protocol_questions.name, j.protocols.name}
    copy_rest(
        parts,
        j.folder,
        {"judgements.jsonl", "questions.jsonl", "summary.json", *protocol_files},
        out,
    )
    if all((p / j.protocols).is_file() for p in parts):
        whole = set(conversations) == set(pin.conversations)
        subset = [] if whole else conversations
        protocol_rows, protocols = merge_protocols(parts, run, order, subset)
        write_jsonl(out / j.protocol_questions, protocol_rows)
        write_json(out / j.protocols, protocols.model_dump(mode="json"))
    write_jsonl(out / j.judgements, judgements)
    write_jsonl(out / j.questions, rows)
    summaries = [read_record(p / j.summary, JudgeSummary) for p in parts]
    merged = merge_judge_summary(judgements, rows, rubrics, summaries)
    write_json(out / j.summary, merged.model_dump(mode="json"))

    copy_rest(parts[:1], LAYOUT.judge_check.folder, set(), out)
    copy_rest(parts[:1], LAYOUT.fetch.scorer, set(), out)
    for stage in SUMMED_USAGE:
        write_json(
            out / usage_file(stage), merge_usage([read_json(p / usage_file(stage)) for p in parts])
        )
    write_json(out / usage_file("judge_check"), read_json(parts[0] / usage_file("judge_check")))
    return conversations


def merge_protocols(
    parts: Sequence[Path], run: Params, order: Sequence[str], subset: Sequence[str]
) -> tuple[list[ProtocolQuestion], ProtocolsSummary]:
    """The parts' rows under each scoring protocol, in the whole run's order (protocol, then
    question), and each protocol's scores summed up again over them, labelled as one run of
    these conversations would be (`subset`: empty when they are the whole mode's); its source
    and judge as every part has them (check_configuration)."""
    from bench.protocols import protocol_summary
    from bench.protocols.label import incomplete_reason

    j = LAYOUT.judge
    rows = [r for p in parts for r in read_records(p / j.protocol_questions, ProtocolQuestion)]
    names = run.judge.protocols
    position = {qid: n for n, qid in enumerate(order)}
    rows.sort(key=lambda r: (names.index(r.protocol), position[r.question_id]))
    first = read_record(parts[0] / j.protocols, ProtocolsSummary)
    test_model = bool(read_record(parts[0] / j.run, StageRun).test_model)
    incomplete = incomplete_reason(run.mode, list(subset))
    summaries = [
        protocol_summary(
            scores.protocol,
            [r for r in rows if r.protocol == scores.protocol],
            source=scores.source,
            judge_model=scores.judge_model,
            test_model=test_model,
            incomplete=incomplete,
        )
        for scores in first.protocols
    ]
    return rows, ProtocolsSummary(protocols=summaries)


def swap_in(tmp: Path) -> None:
    """Each merged out in place of this checkout's."""
    for path in MERGED:
        remove_outputs(path)
        if (tmp / path).exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m commands.merge", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("parts", nargs="+", type=Path, help="the folders of the runs to merge")
    args = parser.parse_args()
    parts: list[Path] = args.parts
    if len(parts) < 2:
        raise DataError("merge needs two or more parts (the folders of finished runs)")
    if len({p.resolve() for p in parts}) != len(parts):
        raise DataError(f"a part is given twice: {' '.join(map(str, parts))}")
    for part in parts:
        if part.resolve() == Path(".").resolve():
            raise DataError(f"{part} is this checkout: copy each part aside before the merge")
    check_configuration(parts)
    tmp = Path(tempfile.mkdtemp(prefix=".merge.", dir="."))
    tmp.chmod(0o777 & ~UMASK)
    try:
        conversations = write_merged(parts, tmp)
        swap_in(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"merge: {len(parts)} parts, conversations {', '.join(conversations)}: report inputs "
        "written; running the report",
        file=sys.stderr,
    )
    # the report stage itself, as `dvc repro` runs it (no stage imports another)
    done = subprocess.run([sys.executable, "-m", "stages.report"], check=False)
    if done.returncode != 0:
        raise SystemExit(done.returncode)


if __name__ == "__main__":
    run_stage(main)
