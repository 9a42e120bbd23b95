"""What made a run's results: each model-calling stage's run record, the run they make, and the
size of the memories the ingest built.

The ingest, answer and judge stages each write `run.json` in their folder (`LAYOUT.<stage>.run`):
the mode, the memory system (ingest and answer), every role's model as the stage used it,
whether a test model was among them, and (answer) whether the system reads gold evidence by
design; ingest adds the system's per-conversation notes (graphrag:
its empty and failed extractions). The report joins the three into a `RunSummary`, which the
record, the page and the estimator read. The ingest also writes `MemorySizes`
(`LAYOUT.ingest.graphs`): what each conversation's memory holds, counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ConfigDict

from schemas.base import Record
from schemas.params import AnswerProtocol, Mode, NativeRegime
from schemas.roles import Role


class ModelUse(Record):
    """One role's model as a stage used it (`clients.llm.client.LlmClient.metadata`)."""

    role: Role
    model: str | None
    api_base: str | None = None
    test_model: bool
    judge_is_agent: bool = False
    """The judge role only: its model fell back to the agent's (`models.judge.model` null)."""


class StageRun(Record):
    """`run.json` of the ingest, answer, judge or judge-check stage."""

    model_config = ConfigDict(extra="allow", frozen=True)
    """Beside the fields: ingest's notes from the memory system, each a mapping of conversation
    (`conv<id>`) to a value, named by what they count (systems/port.py `BuiltMemory.notes`)."""

    mode: Mode
    system: str | None = None
    """The memory system (ingest and answer; the judge scores whatever answered)."""
    regime: NativeRegime | None = None
    """The answer stage only: the regime it answered in (params `answer.regime`, native
    resolved to the system's own)."""
    native_regime: bool | None = None
    """The answer stage only: whether that is the system's own answer."""
    models: list[ModelUse]
    test_model: bool | None = None
    """Whether a test model made them (the judge check's record leaves it out)."""
    reads_gold: bool | None = None
    """The answer stage: whether the system reads gold evidence by design (systems/port.py
    `reads_gold`: the oracle, an upper bound); the other stages leave it out."""
    answer_protocol: AnswerProtocol | None = None
    """The answer stage: what the answerer was given with each question (params
    `answer.protocol`; `exabase`: judge-side annotations); the other stages leave it out."""

    @property
    def notes(self) -> dict[str, Any]:
        """The system's notes per conversation (ingest), by name."""
        return dict(self.model_extra or {})

    def to_json(self) -> dict[str, Any]:
        """The file's content: `system`, the regime, `test_model` and `reads_gold` only where
        the stage has them."""
        data = self.model_dump(mode="json")
        for name in (
            "system",
            "regime",
            "native_regime",
            "test_model",
            "reads_gold",
            "answer_protocol",
        ):
            if data[name] is None:
                del data[name]
        return data


class RunSummary(Record):
    """The run the three stages made together, as the record and the page show it."""

    mode: Mode
    system: str
    regime: NativeRegime | None = None
    """The regime the answers were made in (None: a run made before regimes, the system's own)."""
    native_regime: bool = True
    """Whether that is the system's own answer (params `answer.regime` native or equal to it)."""
    models: list[ModelUse]
    """Every role's model, in stage order (ingest's, the agent's, the judge's)."""
    test_model: bool
    small_models: list[str]
    """The project's own small local models among them (they measure nothing about memory)."""
    judge_is_agent: bool
    reads_gold: bool = False
    """The system read gold evidence by design (the answer stage's run.json): its score is an
    upper bound, not a memory system's."""
    answer_protocol: AnswerProtocol = "beam"
    """What the answerer was given with each question (params `answer.protocol`; a run made
    before it: beam, the question alone)."""

    @property
    def annotated(self) -> bool:
        """The answerer saw judge-side annotations (`answer.protocol: exabase`)."""
        return self.answer_protocol != "beam"


def summarize_runs(
    ingest: StageRun, answer: StageRun, judge: StageRun, small_models: frozenset[str]
) -> RunSummary:
    """One summary of the three stage runs; `small_models`: the names of the local models."""
    models = [*ingest.models, *answer.models, *judge.models]
    return RunSummary(
        mode=judge.mode,
        # the memory system under test (runs made before the port knew only graphrag)
        system=answer.system or ingest.system or "graphrag",
        regime=answer.regime,
        native_regime=answer.native_regime is not False,
        models=models,
        test_model=any(m.test_model for m in models),
        small_models=sorted({m.model for m in models if m.model and m.model in small_models}),
        judge_is_agent=any(m.role == "judge" and m.judge_is_agent for m in models),
        reads_gold=bool(answer.reads_gold),
        answer_protocol=answer.answer_protocol or "beam",
    )


Counts = dict[str, int | float]


class MemorySizes(Record):
    """What each conversation's memory holds (graphrag: chunks, entities, statements, ...; a
    baseline: what it keeps; no_memory: nothing), and the total of each count. The file holds
    `total` beside one `conv<id>` entry per conversation."""

    total: Counts
    conversations: dict[str, Counts]
    """By `conv<id>`, in the order the ingest built them."""

    @classmethod
    def of(cls, counts: Iterable[tuple[str, Mapping[str, int | float]]]) -> MemorySizes:
        """The sizes of the memories built, given as (conversation id, counts)."""
        conversations = {f"conv{cid}": dict(c) for cid, c in counts}
        total: Counts = {}
        for each in conversations.values():
            for key, value in each.items():
                total[key] = total.get(key, 0) + value
        return cls(total=total, conversations=conversations)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemorySizes:
        """The file's content read back."""
        rest = {k: v for k, v in data.items() if k != "total"}
        return cls(total=data.get("total", {}), conversations=rest)

    def to_json(self) -> dict[str, Any]:
        """The file's content: `total` and one entry per conversation."""
        return {"total": self.total, **self.conversations}
