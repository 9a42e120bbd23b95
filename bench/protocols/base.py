"""What every scoring protocol shares: its record, the check of its pinned files, its summary.

A protocol scores the same answers its own way (bench/protocols/__init__.py lists them). Its
model calls go through an injected `ProtocolAsk(request) -> reply | None`, so all of it runs
offline; the judge stage passes one over the judge model (bench/protocols/calls.py).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from clients.llm.port import ChatRequest
from schemas.errors import IntegrityError
from schemas.protocols import (
    Aggregate,
    PinnedSource,
    ProtocolName,
    ProtocolQuestion,
    ProtocolScores,
)
from schemas.records import ABILITIES, Question, Rubric

ProtocolAsk = Callable[[ChatRequest], str | None]
"""One judge call: the reply text, or None when there is no usable reply (the call failed after
its retries, or its reply was cut at max_tokens)."""


class ProtocolJudge(Protocol):
    """A protocol's prompts, read from its pinned files, that score one question."""

    def judge_question(
        self, question: Question, rubric: Rubric, answer: str, ask: ProtocolAsk
    ) -> ProtocolQuestion: ...


@dataclass(frozen=True)
class ScoringProtocol:
    """How one protocol scores: where its judge prompts come from, its item scale and rounding,
    its event-ordering formula, its aggregate (each said in a line, for the record)."""

    name: ProtocolName
    title: str
    published_judge: str
    """The judge model of the protocol's own published numbers."""
    judge_prompt: str
    item_scale: str
    event_formula: str
    aggregate: Aggregate
    read_judge: Callable[[Mapping[str, str], str], ProtocolJudge] | None
    """(text of each pinned file by path, version for the call cache) -> the protocol's judge;
    None for beam_code, which reuses the judge stage's own verdicts (bench/beam_code.py)."""


def check_source(name: str, pin: PinnedSource, contents: Mapping[str, bytes]) -> dict[str, str]:
    """The text of each pinned file of a protocol, after checking its sha256 against the pin."""
    texts: dict[str, str] = {}
    for path, sha256 in pin.files.items():
        data = contents.get(path)
        if data is None:
            raise IntegrityError(
                f"protocol {name}: {pin.repo}@{pin.commit}:{path} was not fetched; run "
                "`dvc repro fetch`"
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise IntegrityError(
                f"protocol {name}: {pin.repo}@{pin.commit}:{path} has sha256 {actual}, the pin "
                f"(pins.yaml judge.protocol_sources.{name}) says {sha256}; run `dvc repro fetch`"
            )
        texts[path] = data.decode("utf-8")
    return texts


def source_version(name: str, pin: PinnedSource) -> str:
    """The prompt version of a protocol's calls (part of the call cache's key)."""
    return f"{name}@{pin.commit[:12]}"


def parse_source(text: str, source: str) -> ast.Module:
    """A pinned file's syntax tree (parsed, never executed)."""
    try:
        return ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise IntegrityError(
            f"{source} is not valid Python (line {exc.lineno}: {exc.msg}); expected the "
            "protocol's pinned file. Check its pin in pins.yaml (judge.protocol_sources)."
        ) from exc


def module_function(
    module: ast.Module, name: str, source: str
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The last module-level definition of function `name` (as at run time)."""
    found = [
        n
        for n in module.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    if not found:
        raise IntegrityError(
            f"{source}: no module-level function {name}(); the pinned file is not the expected "
            "shape. Check its pin in pins.yaml (judge.protocol_sources)."
        )
    return found[-1]


def module_constant(module: ast.Module, name: str, source: str) -> object:
    """The literal value of a module-level assignment (strings, numbers, dicts, lists)."""
    value: ast.expr | None = None
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            value = node.value
    if value is None:
        raise IntegrityError(
            f"{source}: no module-level assignment to {name}; the pinned file is not the "
            "expected shape. Check its pin in pins.yaml (judge.protocol_sources)."
        )
    try:
        return ast.literal_eval(value)
    except ValueError as exc:
        raise IntegrityError(f"{source}: {name} is not a literal ({exc})") from exc


def round_item(raw: float) -> float:
    """A raw judge score on the 0 / 0.5 / 1 scale OmniMemEval and ExaBase share: from 0.75 it
    counts 1, from 0.25 0.5, else 0."""
    return 1.0 if raw >= 0.75 else 0.5 if raw >= 0.25 else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def summarize_protocol(
    protocol: ScoringProtocol,
    rows: Sequence[ProtocolQuestion],
    *,
    source: str,
    judge_model: str,
    paper_comparable: bool,
    label: str,
) -> ProtocolScores:
    """One protocol's scores: each ability's mean, the micro mean (over questions), the macro
    mean (over the abilities asked), and its headline under its own aggregate."""
    abilities: dict[str, float | None] = {
        a: _mean([r.score for r in rows if r.ability == a]) for a in ABILITIES
    }
    micro = _mean([r.score for r in rows])
    macro = _mean(list(abilities.values()))
    return ProtocolScores(
        protocol=protocol.name,
        title=protocol.title,
        source=source,
        judge_model=judge_model,
        published_judge=protocol.published_judge,
        aggregate=protocol.aggregate,
        score=micro if protocol.aggregate == "micro" else macro,
        micro=micro,
        macro=macro,
        abilities=abilities,
        questions=len(rows),
        failed_calls=sum(r.failed_calls for r in rows),
        paper_comparable=paper_comparable,
        label=label,
    )
