"""omnimemeval: BEAM scored as MemTensor/OmniMemEval scores it (scripts/beam/beam_eval.py and
scripts/beam/beam_metric.py at the pinned commit; its prompts in scripts/utils/prompts.py).

- Rubric items: one call per item, a system line and its `BEAM_RUBRIC_ITEM_JUDGE_PROMPT` (which
  shows the judge the question); the reply's score is read from the first flat JSON object holding
  `"score"` (else from a bare `score: x`), and rounded: from 0.75 it counts 1, from 0.25 0.5, below
  0; an unreadable reply scores 0. The question scores the mean of its items.
- Event ordering: one call with `BEAM_EVENT_ORDERING_JUDGE_PROMPT`, in which the judge places each
  reference event in the answer (a 1-based position, -1 when absent). With coverage = share of the
  events placed: fewer than two placed scores coverage × 0.5 (0 with none); else
  max(0, (tau_b + 1) / 2) × coverage, tau_b between the reference order and the placed positions
  (ties counted as its own `_kendall_tau_b` counts them).
- Aggregate: the mean over all questions (micro), as beam_metric.py's overall `nugget_score_mean`.
- One judge run per item (its `--num_runs` default); gpt-4o-mini judged its published table.

The prompts are read from the pinned files' syntax trees, never executed.
"""

from __future__ import annotations

import ast
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.event_order import EVENT_ORDERING
from bench.protocols.base import (
    ProtocolAsk,
    ScoringProtocol,
    module_constant,
    module_function,
    parse_source,
    round_item,
)
from clients.llm.port import ChatRequest
from clients.llm.port import Message as LlmMessage
from schemas.errors import IntegrityError
from schemas.protocols import ProtocolQuestion
from schemas.records import Question, Rubric

EVAL_FILE = "scripts/beam/beam_eval.py"
PROMPTS_FILE = "scripts/utils/prompts.py"
ITEM_PROMPT = "BEAM_RUBRIC_ITEM_JUDGE_PROMPT"
ORDER_PROMPT = "BEAM_EVENT_ORDERING_JUDGE_PROMPT"
ITEM_FIELDS = frozenset({"question", "rubric_item", "response"})
ORDER_FIELDS = frozenset({"question", "reference_ordering", "response"})
ITEM_CALLER = "_judge_rubric_item"
ORDER_CALLER = "_judge_event_ordering"
ITEM_TASK = "omnimemeval_judge"
ORDER_TASK = "omnimemeval_order"


# ---------------------------------------------------------------------------------------------
# Arithmetic (pure)
# ---------------------------------------------------------------------------------------------


_FLAT_OBJECT = re.compile(r'\{[^{}]*"score"\s*:\s*([0-9.]+)[^{}]*\}')
_BARE_SCORE = re.compile(r'"?score"?\s*[:=]\s*([0-9.]+)')


def read_item_score(reply: str) -> float | None:
    """The rounded score of an item reply, or None when none can be read (scored 0). First the
    first flat JSON object with a numeric `"score"`, then a bare `score: x` / `score = x`."""
    flat = _FLAT_OBJECT.search(reply)
    if flat:
        try:
            return round_item(float(json.loads(flat.group(0))["score"]))
        except (ValueError, KeyError, TypeError):
            pass  # falls through to the bare score, as theirs does
    bare = _BARE_SCORE.search(reply)
    if bare:
        try:
            return round_item(float(bare.group(1)))
        except ValueError:
            return None  # e.g. "1.0." (their float() would raise here)
    return None


def kendall_tau_b(reference: Sequence[float], placed: Sequence[float]) -> float:
    """Kendall tau-b of two rank lists counted pair by pair: 1 with fewer than two items, 0 when a
    list is constant (the denominator is 0)."""
    n = len(reference)
    if n < 2:
        return 1.0
    concordant = discordant = ties_reference = ties_placed = 0
    for i in range(n):
        for j in range(i + 1, n):
            dr, dp = reference[i] - reference[j], placed[i] - placed[j]
            if dr == 0:
                ties_reference += 1
            if dp == 0:
                ties_placed += 1
            if dr and dp:
                if (dr > 0) == (dp > 0):
                    concordant += 1
                else:
                    discordant += 1
    pairs = n * (n - 1) // 2
    denominator = ((pairs - ties_reference) * (pairs - ties_placed)) ** 0.5
    return 0.0 if denominator == 0 else (concordant - discordant) / denominator


def order_score(positions: Sequence[float], events: int) -> tuple[float, str]:
    """(score, how) of the judge's positions for `events` reference events (cut or padded with
    -1 to that many): coverage × max(0, (tau_b + 1) / 2), or coverage × 0.5 under two placed."""
    placed = [*positions[:events], *[-1.0] * (events - len(positions))]
    found = [(i, p) for i, p in enumerate(placed) if p > 0]
    coverage = len(found) / events
    if len(found) < 2:
        return (0.0 if coverage == 0 else coverage * 0.5), f"too few events placed ({coverage:.2f})"
    tau_b = kendall_tau_b([i for i, _ in found], [p for _, p in found])
    score = max(0.0, (tau_b + 1.0) / 2.0) * coverage
    return score, f"tau_b={tau_b:.4f}, coverage={coverage:.2f}"


_POSITIONS = re.compile(r'\{[^{}]*"positions"\s*:\s*\[.*?\]\s*\}', re.DOTALL)


def read_positions(reply: str) -> list[float] | None:
    """The judge's positions, one per listed event in its order, or None when the reply holds no
    readable `{"positions": [...]}` object (scored 0). An entry without a position is -1."""
    found = _POSITIONS.search(reply)
    if not found:
        return None
    try:
        entries = json.loads(found.group(0)).get("positions", [])
        positions = [entry.get("position", -1) for entry in entries]
    except (ValueError, AttributeError, TypeError):
        return None
    if not all(isinstance(p, int | float) for p in positions):
        return None  # theirs fails comparing it with 0 and scores 0
    return [float(p) for p in positions]


# ---------------------------------------------------------------------------------------------
# Prompts from the pinned files
# ---------------------------------------------------------------------------------------------


def _template(module: ast.Module, name: str, fields: frozenset[str], source: str) -> str:
    text = module_constant(module, name, source)
    if not isinstance(text, str):
        raise IntegrityError(f"{source}: {name} is not a string")
    try:
        found = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as exc:
        raise IntegrityError(f"{source}: {name} is not a format string ({exc})") from exc
    if found != fields:
        raise IntegrityError(
            f"{source}: {name} fills {sorted(found)}, expected {sorted(fields)}; check the pin "
            "in pins.yaml (judge.protocol_sources.omnimemeval)"
        )
    return text


def _system_line(module: ast.Module, function: str, source: str) -> str:
    """The constant content of the system message the function sends."""
    for node in ast.walk(module_function(module, function, source)):
        if not isinstance(node, ast.Dict):
            continue
        fields = {
            k.value: v
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant)
        }
        role, content = fields.get("role"), fields.get("content")
        if (
            isinstance(role, ast.Constant)
            and role.value == "system"
            and isinstance(content, ast.Constant)
            and isinstance(content.value, str)
        ):
            return content.value
    raise IntegrityError(f"{source}: {function}() sends no constant system message")


@dataclass(frozen=True)
class OmniMemEvalJudge:
    item_system: str
    item_template: str
    order_system: str
    order_template: str
    version: str

    def _request(self, system: str, user: str, task: str) -> ChatRequest:
        return ChatRequest(
            messages=(
                LlmMessage(role="system", content=system),
                LlmMessage(role="user", content=user),
            ),
            task=task,
            prompt_version=self.version,
            instruct_schema=False,
        )

    def item_request(self, question: str, rubric_item: str, answer: str) -> ChatRequest:
        user = self.item_template.format(
            question=question, rubric_item=rubric_item, response=answer
        )
        return self._request(self.item_system, user, ITEM_TASK)

    def order_request(self, question: str, events: Sequence[str], answer: str) -> ChatRequest:
        listing = "\n".join(f"{i + 1}. {event}" for i, event in enumerate(events))
        user = self.order_template.format(
            question=question, reference_ordering=listing, response=answer
        )
        return self._request(self.order_system, user, ORDER_TASK)

    def judge_question(
        self, question: Question, rubric: Rubric, answer: str, ask: ProtocolAsk
    ) -> ProtocolQuestion:
        if question.ability == EVENT_ORDERING:
            reply = ask(self.order_request(question.question, rubric.rubric, answer))
            positions = None if reply is None else read_positions(reply)
            if positions is None:
                score, detail = 0.0, "no readable positions"
            else:
                score, detail = order_score(positions, len(rubric.rubric))
            return ProtocolQuestion(
                protocol="omnimemeval",
                question_id=question.id,
                ability=question.ability,
                score=score,
                calls=1,
                failed_calls=int(positions is None),
                detail=detail,
            )
        items: list[float] = []
        failed = 0
        for item in rubric.rubric:
            reply = ask(self.item_request(question.question, item, answer))
            value = None if reply is None else read_item_score(reply)
            failed += value is None
            items.append(0.0 if value is None else value)
        return ProtocolQuestion(
            protocol="omnimemeval",
            question_id=question.id,
            ability=question.ability,
            score=sum(items) / len(items),
            item_scores=items,
            calls=len(items),
            failed_calls=failed,
        )


def read_judge(texts: Mapping[str, str], version: str) -> OmniMemEvalJudge:
    """The judge from the pinned beam_eval.py and prompts.py (their source text)."""
    evaluation = parse_source(texts[EVAL_FILE], EVAL_FILE)
    prompts = parse_source(texts[PROMPTS_FILE], PROMPTS_FILE)
    return OmniMemEvalJudge(
        item_system=_system_line(evaluation, ITEM_CALLER, EVAL_FILE),
        item_template=_template(prompts, ITEM_PROMPT, ITEM_FIELDS, PROMPTS_FILE),
        order_system=_system_line(evaluation, ORDER_CALLER, EVAL_FILE),
        order_template=_template(prompts, ORDER_PROMPT, ORDER_FIELDS, PROMPTS_FILE),
        version=version,
    )


PROTOCOL = ScoringProtocol(
    name="omnimemeval",
    title="OmniMemEval",
    published_judge="gpt-4o-mini (gpt-4.1-mini answers)",
    judge_prompt=f"its own, shown the question ({PROMPTS_FILE} {ITEM_PROMPT})",
    item_scale="0 / 0.5 / 1; a raw score from 0.75 counts 1, from 0.25 0.5",
    event_formula="the judge places the events; max(0, (tau_b + 1) / 2) × coverage",
    aggregate="micro",
    read_judge=read_judge,
)
