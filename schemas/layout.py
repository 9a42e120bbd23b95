"""Every file the stages exchange, named once.

A stage reads its inputs and writes its outputs through `LAYOUT` (paths relative to the
repository root, where DVC runs every stage); no core, door or system spells a `data/...` path.
Each stage module says which of these files it reads and writes (`STAGE_IO` in
`stages/<name>.py`), and a test holds dvc.yaml's deps, outs and metrics equal to it. A new stage
whose files no other stage reads names them in its own module: it is that module and its entry in
dvc.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DATA = Path("data")
METRICS = Path("metrics")
REPORTS = Path("reports")
FIXTURES = Path("fixtures")


USAGE = METRICS / "usage"
"""The calls and tokens each stage's results took, one file per stage; the report reads the folder
(one dep, one column of `dvc exp show`)."""


def usage_file(stage: str) -> Path:
    """The calls and tokens a stage's results took, per role (read by the report)."""
    return USAGE / f"{stage}.json"


def wall_time_file(stage: str) -> Path:
    """The seconds of a stage's last run and of its phases: a plain out, not a DVC metric (wall
    time on a shared machine compares no runs), read only by `python -m stages.report --print`."""
    return METRICS / "wall_time" / f"{stage}.json"


@dataclass(frozen=True)
class FetchFiles:
    dataset: Path = DATA / "fetch" / "dataset"
    """The run's tier's release files, each under its own name (`100K-00000-of-00001.parquet`)."""
    scorer: Path = DATA / "scorer"
    """The benchmark's pinned scorer files, each at its repository path below this folder."""

    protocols: Path = DATA / "protocols"
    """The pinned files of the scoring protocols params `judge.protocols` lists, and
    `sources.json` naming them (only the judge stage reads them)."""

    @property
    def protocol_sources(self) -> Path:
        return self.protocols / "sources.json"

    def protocol_file(self, protocol: str, path: str) -> Path:
        """A scoring protocol's pinned file (pins.yaml `judge.protocol_sources`), at its
        repository path below `<protocols>/<protocol>/`."""
        return self.protocols / protocol / path


@dataclass(frozen=True)
class VerifyHashFiles:
    receipt: Path = DATA / "verify_hash" / "receipt.json"


@dataclass(frozen=True)
class RepairFiles:
    dataset: Path = DATA / "repair" / "dataset.parquet"
    record: Path = DATA / "repair" / "record.json"


@dataclass(frozen=True)
class SliceFiles:
    folder: Path = DATA / "slice"
    metrics: Path = METRICS / "slice.json"

    @property
    def chats(self) -> Path:
        """One `<conversation>.json` per conversation of the mode."""
        return self.folder / "chats"

    @property
    def questions(self) -> Path:
        return self.folder / "questions.jsonl"

    @property
    def rubrics(self) -> Path:
        return self.folder / "rubrics.jsonl"

    @property
    def sizes(self) -> Path:
        return self.folder / "sizes.json"

    @property
    def source(self) -> Path:
        """What the slices were cut from: the cut, what it left out, the repaired messages."""
        return self.folder / "source.json"

    @property
    def findings(self) -> Path:
        """The data check's findings (bench/data_check.py): what the slices hold that is no chat."""
        return self.folder / "findings.jsonl"


@dataclass(frozen=True)
class SystemStageFiles:
    """A stage that calls models: its folder of results, its run record, usage and wall time."""

    name: str

    @property
    def folder(self) -> Path:
        return DATA / self.name

    @property
    def run(self) -> Path:
        """Which models, system and settings made this stage's results."""
        return self.folder / "run.json"

    @property
    def summary(self) -> Path:
        return self.folder / "summary.json"

    @property
    def usage(self) -> Path:
        return usage_file(self.name)

    @property
    def wall_time(self) -> Path:
        return wall_time_file(self.name)


@dataclass(frozen=True)
class IngestFiles(SystemStageFiles):
    name: str = "ingest"

    @property
    def graphs(self) -> Path:
        """What each conversation's memory holds (counts), and their total."""
        return self.folder / "graphs.json"


@dataclass(frozen=True)
class AnswerFiles(SystemStageFiles):
    name: str = "answer"

    @property
    def traces(self) -> Path:
        return self.folder / "traces.jsonl"

    @property
    def leak_check(self) -> Path:
        """What the scan of every answer-model prompt for gold-only text found
        (bench/leak_check.py)."""
        return self.folder / "leak_check.json"

    @property
    def question_times(self) -> Path:
        """Each question's answer and retrieval seconds (wall time: beside the stage's file)."""
        return self.wall_time.with_name("answer_questions.jsonl")


@dataclass(frozen=True)
class JudgeFiles(SystemStageFiles):
    name: str = "judge"

    @property
    def judgements(self) -> Path:
        return self.folder / "judgements.jsonl"

    @property
    def questions(self) -> Path:
        """One row per question: its scores and what they took."""
        return self.folder / "questions.jsonl"

    @property
    def protocol_questions(self) -> Path:
        """One row per question and scoring protocol (params `judge.protocols`)."""
        return self.folder / "protocol_questions.jsonl"

    @property
    def protocols(self) -> Path:
        """Each scoring protocol's scores per ability and overall, with its label."""
        return self.folder / "protocols.json"


@dataclass(frozen=True)
class JudgeCheckFiles(SystemStageFiles):
    name: str = "judge_check"

    @property
    def cases(self) -> Path:
        """The calibration cases, each with the score it should get."""
        return self.folder / "cases.jsonl"

    @property
    def results(self) -> Path:
        """The judge's score, reason and reply per case."""
        return self.folder / "results.jsonl"


@dataclass(frozen=True)
class ReportFiles:
    record: Path = REPORTS / "memory.md"
    page: Path = REPORTS / "run.html"
    abilities_plot: Path = METRICS / "plots" / "abilities.csv"
    cost_plot: Path = METRICS / "plots" / "cost.csv"
    metrics: Path = METRICS / "report.json"
    questions: Path = METRICS / "questions.csv"
    """Each question's score: what `make compare` pairs between runs (in git, so every
    experiment's commit carries its own)."""


@dataclass(frozen=True)
class CompareFiles:
    """`make compare` (no DVC stage: it reads experiments, not a run)."""

    table: Path = REPORTS / "compare.md"
    csv: Path = REPORTS / "compare.csv"
    plot: Path = REPORTS / "compare.svg"


@dataclass(frozen=True)
class Layout:
    fetch: FetchFiles = field(default_factory=FetchFiles)
    verify_hash: VerifyHashFiles = field(default_factory=VerifyHashFiles)
    repair: RepairFiles = field(default_factory=RepairFiles)
    slice: SliceFiles = field(default_factory=SliceFiles)
    ingest: IngestFiles = field(default_factory=IngestFiles)
    answer: AnswerFiles = field(default_factory=AnswerFiles)
    judge: JudgeFiles = field(default_factory=JudgeFiles)
    judge_check: JudgeCheckFiles = field(default_factory=JudgeCheckFiles)
    report: ReportFiles = field(default_factory=ReportFiles)
    compare: CompareFiles = field(default_factory=CompareFiles)


LAYOUT = Layout()


@dataclass(frozen=True)
class StageIO:
    """What one DVC stage reads (data deps; its code deps are dvc.yaml's business) and writes.

    Each stage module declares its own as `STAGE_IO`, beside its `main()`;
    tests/schemas/test_layout.py holds dvc.yaml's deps, outs and metrics equal to it."""

    deps: tuple[Path, ...] = ()
    outs: tuple[Path, ...] = ()
    metrics: tuple[Path, ...] = ()
