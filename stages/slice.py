"""slice: build the current mode's chat slices, questions and rubrics from the repaired data.

The entry point and the stage's only shell: it reads params, the fixture and the repaired data
(with the readers in stages/common.py), calls the core in bench/slice.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.data_check import Finding
from bench.repair import REPAIR_OUT
from bench.slice import (
    METRICS,
    SLICE_OUT,
    Built,
    BuiltSlice,
    BuiltSummary,
    ModeSlicer,
    SliceFixture,
    check_fixture_conversations,
    check_pins,
    cut_points,
    has_official_cut,
    repin_fixture,
    restrict,
    sizes,
    summarize,
)
from clients.files import UMASK, remove_outputs, write_atomic, write_json, write_jsonl
from schemas.errors import DataError, ParamsError
from schemas.layout import LAYOUT, StageIO
from schemas.params import Cut, Mode, Repair
from schemas.records import RepairedMessage, SliceSource
from stages.common import (
    iter_repaired_rows,
    load_fixture,
    read_params,
    repaired_conversation_ids,
    run_stage,
)

STAGE_IO = StageIO(
    deps=(LAYOUT.repair.dataset,), outs=(LAYOUT.slice.folder,), metrics=(LAYOUT.slice.metrics,)
)


def start_outputs(out: Path) -> Path:
    """A temp folder beside `out` to write the slice into, swapped in by `finish_outputs`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o777 & ~UMASK)  # mkdtemp makes it private; the out is an ordinary folder
    return tmp


def write_slice(tmp: Path, item: BuiltSlice) -> None:
    write_atomic(tmp / "chats" / f"conv{item.chat.conversation_id}.json", item.text)


def finish_outputs(
    tmp: Path,
    built: Built | BuiltSummary,
    out: Path,
    metrics_path: Path,
    source: SliceSource,
    findings: Sequence[Finding] = (),
) -> None:
    """Write the rest of the slice into `tmp` (its chats are there), then swap it in."""
    write_jsonl(tmp / "questions.jsonl", built.questions)
    write_jsonl(tmp / "rubrics.jsonl", built.rubrics)
    write_json(tmp / "sizes.json", sizes(built))
    write_jsonl(tmp / LAYOUT.slice.findings.name, findings)
    write_json(tmp / LAYOUT.slice.source.name, source.model_dump(mode="json"))
    remove_outputs(out)
    tmp.replace(out)
    write_json(metrics_path, summarize(built))


def write_outputs(
    built: Built,
    out: Path,
    metrics_path: Path,
    source: SliceSource,
    findings: Sequence[Finding] = (),
) -> None:
    """Write into a temp folder beside `out`, then swap it in: never a half-written slice."""
    tmp = start_outputs(out)
    try:
        for item in built.slices:
            write_slice(tmp, item)
        finish_outputs(tmp, built, out, metrics_path, source, findings)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_outputs(out, metrics_path)
        raise


def make_slices(
    source: Path,
    fixture_path: Path,
    mode: str,
    tokenizer: str,
    out: Path,
    metrics: Path,
    conversations: Sequence[str] = (),
    *,
    cut: Cut = "full",
    repairs: Sequence[Repair] = (),
    stop_on_findings: bool = False,
) -> tuple[BuiltSummary, list[Finding]]:
    """The mode's slices (only `conversations`, when given), each chat cut as `cut` says,
    checked against the fixture, and the data check's findings on them; with
    `stop_on_findings`, a finding is a DataError and nothing is written. `repairs` (pins.yaml,
    the run's tier's) name the messages the record says were repaired. The repaired data is read
    one conversation at a time, and each slice written to a temp folder as it is built (swapped
    in once all are checked): one conversation in memory at a time."""
    remove_outputs(out, metrics)
    fixture = load_fixture(fixture_path)
    if mode not in fixture.modes:
        raise ParamsError(
            f"slice fixture {fixture_path} has no mode {mode!r}: its modes are "
            f"{', '.join(fixture.modes)} (the fixture is the run's tier's: params `tier`)"
        )
    pin = restrict(fixture.modes[mode], conversations, mode)
    check_fixture_conversations(repaired_conversation_ids(source), pin, mode, fixture_path)
    points = cut_points(fixture, cut)
    slicer = ModeSlicer(pin, mode, fixture_path, fixture.known_bad_rubric, tokenizer, points)
    tmp = start_outputs(out)
    try:
        for conv, row in iter_repaired_rows(source, slicer.needs):
            item = slicer.add(conv, row)
            if item is not None:
                write_slice(tmp, item)
        built = slicer.summary()
        check_pins(built, pin, mode, cut)
        findings = slicer.findings()
        if findings and stop_on_findings:
            listed = "; ".join(f"{f.kind} {f.where}" for f in findings)
            raise DataError(
                f"the data check found {len(findings)} defect(s) in mode {mode} ({listed}): "
                "repair each with a pinned rule (pins.yaml `repair`), or set settings.yaml "
                "`slice.stop_on_findings: false` to run with them reported in "
                f"{LAYOUT.slice.findings}"
            )
        repaired = [
            RepairedMessage(conversation_id=r.conversation_id, message_id=r.message_id, why=r.why)
            for r in repairs
        ]
        finish_outputs(tmp, built, out, metrics, slicer.source(cut, repaired), findings)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_outputs(out, metrics)
        raise
    return built, findings


def repin(source: Path, fixture_path: Path, tokenizer: str) -> SliceFixture:
    """Rewrite the fixture's message ids and hashes for every mode and both cuts from the
    repaired data, read one conversation at a time."""
    fixture = load_fixture(fixture_path)
    present = repaired_conversation_ids(source)
    for mode, pin in fixture.modes.items():  # the message ids are re-pinned
        check_fixture_conversations(present, pin, mode, fixture_path, messages=False)
    # the slices of every mode at the full cut, and at the official cut where it is pinned (the
    # official slices wait for the cut's pins)
    points = cut_points(fixture, "official") if has_official_cut(fixture) else None
    slicers: dict[Mode, tuple[ModeSlicer, ModeSlicer | None]] = {}
    for mode, pin in fixture.modes.items():
        unpinned = pin.model_copy(update={"slices": {}, "official_slices": {}})
        full = ModeSlicer(unpinned, mode, fixture_path, fixture.known_bad_rubric, tokenizer, {})
        at_cut = None
        if points is not None:
            at_cut = ModeSlicer(
                unpinned, mode, fixture_path, fixture.known_bad_rubric, tokenizer, points
            )
        slicers[mode] = (full, at_cut)
    every = [s for pair in slicers.values() for s in pair if s is not None]
    for conv, row in iter_repaired_rows(source, lambda c: any(s.needs(c) for s in every)):
        for slicer in every:
            if slicer.needs(conv):
                slicer.add(conv, row)
    built = {mode: full.summary() for mode, (full, _) in slicers.items()}
    official = {
        mode: (at_cut.summary() if at_cut is not None else built[mode])
        for mode, (_, at_cut) in slicers.items()
    }
    updated = repin_fixture(fixture, built, official)
    write_json(fixture_path, updated.model_dump(mode="json"))
    return updated


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.slice", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--repin",
        action="store_true",
        help="rewrite the fixture's message ids and slice hashes from the repaired data "
        "(only after a person has looked at the difference)",
    )
    args = parser.parse_args()
    run = read_params()
    params = run.slice
    if args.repin:
        repin(REPAIR_OUT, Path(run.fixture), params.tokenizer)
        print(f"slice: re-pinned message ids and hashes of every mode in {run.fixture}")
        return
    mode = run.mode
    built, findings = make_slices(
        REPAIR_OUT,
        Path(run.fixture),
        mode,
        params.tokenizer,
        SLICE_OUT,
        METRICS,
        params.conversations,
        cut=params.cut,
        repairs=run.tier_repairs,
        stop_on_findings=params.stop_on_findings,
    )
    total = sizes(built)["total"]
    only = f", conversations {', '.join(params.conversations)} only" if params.conversations else ""
    print(
        f"slice (tier {run.tier}, {mode}{only}"
        f"{', official cut' if params.cut == 'official' else ''}): "
        f"{total['questions']} questions, "
        f"{total['messages']} messages in "
        f"{total['sessions']} sessions, {total['tokens']:,} tokens -> {SLICE_OUT}"
    )
    for finding in findings:
        print(f"slice: data check: {finding.kind} in {finding.where}: {finding.detail}")
    if findings:
        print(f"slice: {len(findings)} finding(s) reported in {LAYOUT.slice.findings}, not fixed")


if __name__ == "__main__":
    run_stage(main)
