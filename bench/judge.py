"""judge: score each answer against its rubric with the benchmark's own scorer prompts.

Produces one `Judgement` per question and the judge's summary (`summarize`). This module is the
pure core: the prompts are read from the benchmark's pinned source files by parsing them with
`ast` (never importing or executing them), and every model call goes through an injected
`ask(messages) -> str | None` callable (None: the call failed), so all of it runs offline.

Two known defects of the benchmark's own scorer are corrected here:
- its code never fills the judge prompt's `<question>` slot (the prompt asks whether the response
  addresses "the QUESTION" that it is never shown): we fill it, and where the pinned text has no
  slot we add a `QUESTION:` line above the rubric criterion;
- it casts the judge's score with `int()` in some abilities, turning 0.5 into 0: we keep 0.5.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from scipy.stats import kendalltau

from clients.llm.port import ChatRequest
from clients.llm.port import Message as LlmMessage
from clients.llm.replies import parse_json_reply
from schemas.errors import DataError, IntegrityError
from schemas.judging import (
    FLAGS,
    ITEM_VALUES,
    EventAlignment,
    Flag,
    ItemScore,
    Judgement,
    JudgePrompts,
)
from schemas.params import JudgeParams, PinnedFile
from schemas.records import ABILITIES, Question, Rubric

ITEM_PROMPT_NAME = "unified_llm_judge_base_prompt"
EQUIVALENCE_FUNCTION = "llm_equivalence"
QUESTION = "<question>"
RUBRIC_ITEM = "<rubric_item>"
LLM_RESPONSE = "<llm_response>"
FIRST = "<first>"
SECOND = "<second>"
EVENT_ORDERING = "event_ordering"

Message = dict[str, str]
"""A chat message as the model layer takes it: {"role": "system" | "user", "content": ...}."""
Ask = Callable[[list[Message]], str | None]
"""One judge-model call: the reply text, or None when the call failed (after its own retries)."""
AreEquivalent = Callable[[str, str], bool | None]
"""(answer line, rubric event) -> same event?  None when the call failed."""

_MAX_NESTING = 50


# ---------------------------------------------------------------------------------------------
# Pinned files
# ---------------------------------------------------------------------------------------------


def scorer_file_path(params: JudgeParams, pinned: PinnedFile) -> Path:
    """Where a pinned scorer file lives once fetched: `<scorer_dir>/<path in the repository>`."""
    return Path(params.scorer_dir) / pinned.path


# ---------------------------------------------------------------------------------------------
# Prompt extraction (ast only)
# ---------------------------------------------------------------------------------------------


def _parse(text: str, source: str) -> ast.Module:
    try:
        return ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise IntegrityError(
            f"{source} is not valid Python (line {exc.lineno}: {exc.msg}); expected the "
            "benchmark's pinned scorer file. Delete it and fetch it again."
        ) from exc


def _assigned_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _bindings(statements: Sequence[ast.stmt]) -> dict[str, ast.expr]:
    """Name -> value of plain assignments among `statements` (the last one wins, as at run time)."""
    found: dict[str, ast.expr] = {}
    for node in statements:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if value is None:
            continue
        for name in _assigned_names(node):
            found[name] = value
    return found


def _string_value(
    node: ast.expr,
    *,
    source: str,
    what: str,
    scopes: Sequence[Mapping[str, ast.expr]] = (),
    placeholders: Mapping[str, str] | None = None,
    depth: int = 0,
) -> str:
    """The text a string expression evaluates to: constants, `+` concatenation, `.strip()`-like
    calls, names bound to such, and f-strings whose fields are mapped to placeholders."""
    if depth > _MAX_NESTING:
        raise IntegrityError(f"{source}: {what} nests too deeply to be a prompt text")

    def again(child: ast.expr) -> str:
        return _string_value(
            child,
            source=source,
            what=what,
            scopes=scopes,
            placeholders=placeholders,
            depth=depth + 1,
        )

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return again(node.left) + again(node.right)
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                parts.append(part.value)
            elif (
                isinstance(part, ast.FormattedValue)
                and isinstance(part.value, ast.Name)
                and placeholders is not None
                and part.value.id in placeholders
                and part.conversion == -1
                and part.format_spec is None
            ):
                parts.append(placeholders[part.value.id])
            else:
                allowed = sorted(placeholders) if placeholders else "none"
                raise IntegrityError(
                    f"{source}:{node.lineno}: {what} is an f-string with a field this port does "
                    f"not know (allowed: plain names {allowed}); the pinned file is not the "
                    "expected shape: check the commit in params.yaml (section judge)."
                )
        return "".join(parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("strip", "lstrip", "rstrip")
        and not node.args
        and not node.keywords
    ):
        base = again(node.func.value)
        method: Callable[[], str] = getattr(base, node.func.attr)
        return method()
    if isinstance(node, ast.Name):
        for scope in scopes:
            if node.id in scope:
                return again(scope[node.id])
    raise IntegrityError(
        f"{source}:{getattr(node, 'lineno', '?')}: {what} is a {type(node).__name__} expression, "
        "expected a string literal (or a concatenation / f-string of them); the pinned file is "
        "not the expected shape: check the commit in params.yaml (section judge)."
    )


def _require(text: str, needed: Sequence[str], *, source: str, what: str) -> None:
    missing = [p for p in needed if p not in text]
    if missing:
        raise IntegrityError(
            f"{source}: {what} lacks the placeholder(s) {', '.join(missing)}; expected the "
            "benchmark's scorer text. Check the pinned commit in params.yaml (section judge)."
        )


def extract_item_prompt(prompts_py_text: str, *, source: str = "src/prompts.py") -> str:
    """`unified_llm_judge_base_prompt`, verbatim, from the text of the benchmark's prompts.py."""
    module = _parse(prompts_py_text, source)
    scope = _bindings(module.body)
    if ITEM_PROMPT_NAME not in scope:
        raise IntegrityError(
            f"{source}: no module-level assignment to {ITEM_PROMPT_NAME}; expected the "
            "benchmark's prompts file. Check the pinned commit in params.yaml (section judge)."
        )
    text = _string_value(
        scope[ITEM_PROMPT_NAME], source=source, what=ITEM_PROMPT_NAME, scopes=[scope]
    )
    _require(text, (RUBRIC_ITEM, LLM_RESPONSE), source=source, what=ITEM_PROMPT_NAME)
    return text


def _function(module: ast.Module, name: str, source: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    found = [
        node
        for node in module.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
    ]
    if not found:
        raise IntegrityError(
            f"{source}: no module-level function {name}(); expected the benchmark's "
            "compute_metrics file. Check the pinned commit in params.yaml (section judge)."
        )
    return found[-1]


def _as_message_dict(node: ast.expr, scope: Mapping[str, ast.expr]) -> ast.Dict | None:
    if isinstance(node, ast.Name):
        node = scope.get(node.id, node)
    if not isinstance(node, ast.Dict):
        return None
    keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
    return node if "role" in keys else None


def _messages_list(
    function: ast.FunctionDef | ast.AsyncFunctionDef, scope: Mapping[str, ast.expr]
) -> list[ast.Dict]:
    """The list literal of message dicts in the function: the one bound to `messages` if there
    is one, else the first in source order."""
    candidates: list[tuple[bool, int, list[ast.Dict]]] = []
    for node in ast.walk(function):
        if not isinstance(node, ast.List):
            continue
        dicts = [_as_message_dict(v, scope) for v in node.elts]
        if dicts and all(d is not None for d in dicts):
            named = scope.get("messages") is node
            candidates.append((named, node.lineno, [d for d in dicts if d is not None]))
    if not candidates:
        raise IntegrityError(
            f"{function.name}() holds no list of message dicts (with a 'role' key); expected the "
            "benchmark's llm_equivalence. Check the pinned commit in params.yaml (section judge)."
        )
    candidates.sort(key=lambda c: (not c[0], c[1]))
    return candidates[0][2]


def extract_equivalence_messages(
    compute_metrics_py_text: str, *, source: str = "src/evaluation/compute_metrics.py"
) -> tuple[str, str]:
    """(system message, user template) of `llm_equivalence`; in the template the function's first
    and second parameters become `<first>` and `<second>`."""
    module = _parse(compute_metrics_py_text, source)
    function = _function(module, EQUIVALENCE_FUNCTION, source)
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if len(params) < 2:
        raise IntegrityError(
            f"{source}:{function.lineno}: {EQUIVALENCE_FUNCTION}() takes {len(params)} "
            "positional parameter(s), expected the two snippets first."
        )
    placeholders = {params[0]: FIRST, params[1]: SECOND}
    statements = [n for n in ast.walk(function) if isinstance(n, ast.stmt)]
    local = _bindings(sorted(statements, key=lambda n: (n.lineno, n.col_offset)))
    scopes = [local, _bindings(module.body)]
    contents: dict[str, list[str]] = {}
    for message in _messages_list(function, local):
        fields = {
            k.value: v
            for k, v in zip(message.keys, message.values, strict=True)
            if isinstance(k, ast.Constant)
        }
        role_node, content_node = fields.get("role"), fields.get("content")
        if not (isinstance(role_node, ast.Constant) and isinstance(role_node.value, str)):
            raise IntegrityError(
                f"{source}:{message.lineno}: a message's role is not a string literal"
            )
        if content_node is None:
            raise IntegrityError(
                f"{source}:{message.lineno}: the {role_node.value} message has no content"
            )
        text = _string_value(
            content_node,
            source=source,
            what=f"the {role_node.value} message of {EQUIVALENCE_FUNCTION}()",
            scopes=scopes,
            placeholders=placeholders,
        )
        contents.setdefault(role_node.value, []).append(text)
    roles = {role: len(texts) for role, texts in contents.items()}
    if roles != {"system": 1, "user": 1}:
        raise IntegrityError(
            f"{source}: {EQUIVALENCE_FUNCTION}() sends messages with roles {roles}, expected one "
            "system and one user message. Check the pinned commit in params.yaml (section judge)."
        )
    user = contents["user"][0]
    _require(
        user, (FIRST, SECOND), source=source, what=f"the user message of {EQUIVALENCE_FUNCTION}()"
    )
    return contents["system"][0], user


def extract_judge_prompts(
    prompts_py_text: str,
    compute_metrics_py_text: str,
    *,
    prompts_source: str = "src/prompts.py",
    compute_metrics_source: str = "src/evaluation/compute_metrics.py",
) -> JudgePrompts:
    """The scorer's texts from the two pinned files' source text (parsed, never executed)."""
    system, user = extract_equivalence_messages(
        compute_metrics_py_text, source=compute_metrics_source
    )
    return JudgePrompts(
        item_prompt=extract_item_prompt(prompts_py_text, source=prompts_source),
        equivalence_system=system,
        equivalence_user=user,
    )


# ---------------------------------------------------------------------------------------------
# Filling the prompts
# ---------------------------------------------------------------------------------------------


def fill_placeholders(template: str, values: Mapping[str, str]) -> str:
    """Replace every placeholder in one pass, so a value that itself contains a placeholder
    (an answer quoting `<rubric_item>`) is never substituted again."""
    if not values:
        return template
    pattern = re.compile("|".join(re.escape(k) for k in sorted(values, key=len, reverse=True)))
    return pattern.sub(lambda m: values[m.group(0)], template)


def with_question_slot(item_prompt: str) -> str:
    """The item prompt with a `<question>` slot: as is when it has one, else with a
    `QUESTION: <question>` line added above the rubric-criterion line, in that line's style."""
    if QUESTION in item_prompt:
        return item_prompt
    lines = item_prompt.split("\n")
    for index, line in enumerate(lines):
        if RUBRIC_ITEM in line:
            prefix = re.match(r"\s*(?:[-*•]\s+)?", line)
            lead = prefix.group(0) if prefix else ""
            lines.insert(index, f"{lead}QUESTION: {QUESTION}")
            return "\n".join(lines)
    raise IntegrityError(f"the judge prompt has no {RUBRIC_ITEM} slot")


def item_messages(
    prompts: JudgePrompts, question: str, rubric_item: str, response: str
) -> list[Message]:
    """The rubric-item judge call: one user message, as the benchmark sends it."""
    content = fill_placeholders(
        with_question_slot(prompts.item_prompt),
        {QUESTION: question, RUBRIC_ITEM: rubric_item, LLM_RESPONSE: response},
    )
    return [{"role": "user", "content": content}]


def equivalence_messages(
    prompts: JudgePrompts, reference_event: str, answer_line: str
) -> list[Message]:
    """The event-equivalence call: the reference event first, the answer line second, as the
    benchmark's `align_with_llm` passes them."""
    values = {FIRST: reference_event, SECOND: answer_line}
    return [
        {"role": "system", "content": fill_placeholders(prompts.equivalence_system, values)},
        {"role": "user", "content": fill_placeholders(prompts.equivalence_user, values)},
    ]


# ---------------------------------------------------------------------------------------------
# Parsing replies
# ---------------------------------------------------------------------------------------------


def _item_value(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            return None
    if not isinstance(raw, int | float):
        return None
    for value in ITEM_VALUES:
        if math.isclose(float(raw), value, abs_tol=1e-9):
            return value
    return None


def _verdict_score(raw: object) -> float:
    value = _item_value(raw)
    if value is None:
        raise ValueError(f"score {raw!r} is not one of 1, 0.5, 0")
    return value


class JudgeVerdict(BaseModel):
    """The reply the benchmark's judge prompt asks for. Only the top-level object counts: a score
    nested anywhere else (a list of verdicts, an object inside the reason) is no verdict."""

    model_config = ConfigDict(extra="ignore")

    score: Annotated[
        float,
        BeforeValidator(_verdict_score),
        Field(json_schema_extra={"enum": list(ITEM_VALUES)}),
    ]
    reason: str | None = None


def score_item(rubric_item: str, reply: str | None) -> ItemScore:
    """One rubric item's verdict from the judge's reply: the top-level JSON object with `score`
    1, 0.5 or 0 and a `reason`, read by the model layer's one parser (syntax slips repaired, a
    cut-off reply refused). No reply, or one without a valid verdict, scores 0 with the cause
    recorded. (The model layer already asks again for a reply without one, so in a run this is
    the record of what was scored, and a parse error is left only by a reply that passed.)"""
    if reply is None:
        return ItemScore(rubric_item=rubric_item, score=0.0, error="the judge call failed")
    try:
        verdict = JudgeVerdict.model_validate(parse_json_reply(reply))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()
        )
        return ItemScore(
            rubric_item=rubric_item,
            score=0.0,
            parse_error=True,
            error=f"no valid top-level verdict ({problems}): {reply[:200]!r}",
            reply=reply,
        )
    except ValueError as exc:  # UnusableReply: no JSON, or cut off
        return ItemScore(
            rubric_item=rubric_item, score=0.0, parse_error=True, error=str(exc), reply=reply
        )
    return ItemScore(
        rubric_item=rubric_item, score=verdict.score, reason=verdict.reason, reply=reply
    )


_YES = re.compile(r"\byes\b")


def parse_equivalence_reply(reply: str) -> bool:
    """The benchmark counts a reply as 'same event' when it contains "yes" (any case); we ask for
    the whole word, so "eyes" or "yesterday" in a chatty reply do not count."""
    return _YES.search(reply.lower()) is not None


# ---------------------------------------------------------------------------------------------
# Event ordering
# ---------------------------------------------------------------------------------------------

_LINE_MARKER = re.compile(r"^(?:[-*+•·‣▪◦–—]|\(?\d{1,3}[.)]|#{1,6})\s+")


def split_answer_lines(answer: str) -> list[str]:
    """The answer's events: one per line, without bullets, numbering or headings' hashes; lines
    with no letter or digit (blank lines, rules like `---`) are dropped."""
    lines: list[str] = []
    for raw in answer.splitlines():
        line = raw.strip()
        while (marker := _LINE_MARKER.match(line)) is not None:
            line = line[marker.end() :].strip()
        if any(ch.isalnum() for ch in line):
            lines.append(line)
    return lines


def align_events(
    reference: Sequence[str],
    lines: Sequence[str],
    are_equivalent: AreEquivalent,
    *,
    max_calls: int | None = None,
) -> tuple[list[int | None], int, int, bool]:
    """Greedy first-match alignment as the benchmark's `align_with_llm`: each line, in order, is
    compared with each still-unused reference event, in order, until one is equivalent.
    Returns (match per line, calls, failed calls, capped)."""
    used: set[int] = set()
    matches: list[int | None] = []
    calls = failed = 0
    capped = False
    for line in lines:
        matched: int | None = None
        for index, event in enumerate(reference):
            if index in used:
                continue
            if max_calls is not None and calls >= max_calls:
                capped = True
                break
            calls += 1
            verdict = are_equivalent(line, event)
            if verdict is None:
                failed += 1
            elif verdict:
                matched = index
                break
        if matched is not None:
            used.add(matched)
        matches.append(matched)
    return matches, calls, failed, capped


def order_scores(
    reference_count: int, matches: Sequence[int | None]
) -> tuple[float, float, float, float | None, float]:
    """(precision, recall, f1, tau_b, tau_norm) as the benchmark's `event_ordering_score`, on
    positions: the union is the reference events in order, then the unmatched lines; each list
    ranks its own members 1.. and everything else last (one shared tie rank); tau-b by scipy.

    tau-b is undefined when a rank list is constant: with no answer lines (f1 = 0, so tau_norm
    = 0) or when the union holds a single event. The benchmark lets scipy's NaN spread into its
    means; we use tau_norm = 1 when that one event was matched (there is nothing to misorder)
    and 0 otherwise, so every question keeps a number."""
    if reference_count < 1:
        raise DataError("event ordering needs at least one reference event, found none")
    matched = [m for m in matches if m is not None]
    tp = len(matched)
    fp = len(matches) - tp
    fn = reference_count - tp
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    union: list[tuple[str, int]] = [("ref", i) for i in range(reference_count)]
    union += [("line", k) for k, m in enumerate(matches) if m is None]
    tie_rank = len(union) + 1
    system_rank: dict[tuple[str, int], int] = {}
    for position, m in enumerate(matches, start=1):
        system_rank[("ref", m) if m is not None else ("line", position - 1)] = position
    reference_ranks = [i + 1 if kind == "ref" else tie_rank for kind, i in union]
    system_ranks = [system_rank.get(u, tie_rank) for u in union]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tau = float(kendalltau(reference_ranks, system_ranks, variant="b").statistic)
    if math.isnan(tau):
        return precision, recall, f1, None, 1.0 if f1 > 0 else 0.0
    return precision, recall, f1, tau, (tau + 1) / 2


def score_event_ordering(
    reference: Sequence[str],
    answer: str,
    are_equivalent: AreEquivalent,
    *,
    max_calls: int | None = None,
) -> EventAlignment:
    lines = split_answer_lines(answer)
    matches, calls, failed, capped = align_events(
        reference, lines, are_equivalent, max_calls=max_calls
    )
    precision, recall, f1, tau_b, tau_norm = order_scores(len(reference), matches)
    return EventAlignment(
        answer_lines=lines,
        matches=matches,
        calls=calls,
        failed_calls=failed,
        capped=capped,
        precision=precision,
        recall=recall,
        f1=f1,
        tau_b=tau_b,
        tau_norm=tau_norm,
    )


# ---------------------------------------------------------------------------------------------
# One question
# ---------------------------------------------------------------------------------------------


def judge_question(
    question: Question,
    rubric: Rubric,
    answer: str,
    prompts: JudgePrompts,
    ask: Ask,
    *,
    max_equivalence_calls: int | None = None,
) -> Judgement:
    """Score one answer. Rubric abilities: one judge call per item, score = mean item score.
    event_ordering: the equivalence alignment only (item i scores 1 when some line matched it),
    score = event_f1 × event_tau_norm. `ask` must return None rather than raise on failure."""
    if rubric.question_id != question.id or rubric.ability != question.ability:
        raise DataError(
            f"rubric {rubric.question_id} ({rubric.ability}) was paired with question "
            f"{question.id} ({question.ability}); the rubrics and questions files are out of step"
        )
    if not rubric.rubric:
        raise DataError(f"question {question.id} has an empty rubric; nothing to judge it by")
    flags: set[Flag] = set()
    if rubric.known_bad_rubric:
        flags.add("known_bad_rubric")

    event: EventAlignment | None = None
    if question.ability == EVENT_ORDERING:

        def are_equivalent(line: str, reference_event: str) -> bool | None:
            reply = ask(equivalence_messages(prompts, reference_event, line))
            return None if reply is None else parse_equivalence_reply(reply)

        event = score_event_ordering(
            rubric.rubric, answer, are_equivalent, max_calls=max_equivalence_calls
        )
        matched_line = {m: k for k, m in enumerate(event.matches) if m is not None}
        items = [
            ItemScore(
                rubric_item=text,
                score=1.0 if index in matched_line else 0.0,
                reason=(
                    f"matched answer line {matched_line[index] + 1}"
                    if index in matched_line
                    else "no answer line matched"
                ),
            )
            for index, text in enumerate(rubric.rubric)
        ]
        calls = event.calls
        score = event.f1 * event.tau_norm
        if event.failed_calls:
            flags.add("model_error")
        if event.capped:
            flags.add("call_cap_reached")
    else:
        items = [
            score_item(item, ask(item_messages(prompts, question.question, item, answer)))
            for item in rubric.rubric
        ]
        calls = len(items)
        score = sum(i.score for i in items) / len(items)
        if any(i.parse_error for i in items):
            flags.add("parse_error")
        if any(i.error is not None and not i.parse_error for i in items):
            flags.add("model_error")
    return Judgement(
        question_id=question.id,
        ability=question.ability,
        items=items,
        score=score,
        score_excluding_known_bad=None if rubric.known_bad_rubric else score,
        event=event,
        flags=[f for f in FLAGS if f in flags],
        calls=calls,
    )


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _group(js: Sequence[Judgement]) -> dict[str, float | int | None]:
    group: dict[str, float | int | None] = {
        "questions": len(js),
        "score": _mean([j.score for j in js]),
        "score_excluding_known_bad": _mean([j.score_excluding_known_bad for j in js]),
        "judge_calls": sum(j.calls for j in js),
        "judge_calls_per_question": _mean([float(j.calls) for j in js]),
    }
    for flag in FLAGS:
        group[f"{flag}_questions"] = sum(flag in j.flags for j in js)
    return group


def summarize(
    judgements: Sequence[Judgement], rubrics: Sequence[Rubric]
) -> dict[str, dict[str, float | int | None]]:
    """data/judge/summary.json: one group per ability (all ten always present, null scores where
    an ability has no question) and `overall`. Ability score = mean over its questions; overall
    score = mean over all questions, `macro_score` = mean of the ability scores. event_ordering
    also carries the means of event_f1 and event_tau_norm. Every rubric must have exactly one
    judgement."""
    by_id = {r.question_id: r for r in rubrics}
    seen: set[str] = set()
    for j in judgements:
        rubric = by_id.get(j.question_id)
        if rubric is None:
            raise DataError(
                f"judgement for {j.question_id} has no rubric; the inputs are out of step"
            )
        if rubric.ability != j.ability:
            raise DataError(
                f"{j.question_id}: judged as {j.ability}, but its rubric says {rubric.ability}"
            )
        if j.question_id in seen:
            raise DataError(f"{j.question_id} was judged twice")
        seen.add(j.question_id)
    missing = sorted(set(by_id) - seen)
    if missing:
        raise DataError(
            f"{len(missing)} question(s) have no judgement, e.g. {', '.join(missing[:5])}"
        )

    metrics: dict[str, dict[str, float | int | None]] = {}
    for ability in ABILITIES:
        metrics[ability] = _group([j for j in judgements if j.ability == ability])
    events = [j.event for j in judgements if j.event is not None]
    metrics[EVENT_ORDERING]["event_f1"] = _mean([e.f1 for e in events])
    metrics[EVENT_ORDERING]["event_tau_norm"] = _mean([e.tau_norm for e in events])
    overall = _group(judgements)
    overall["macro_score"] = _mean([metrics[a]["score"] for a in ABILITIES])
    overall["macro_score_excluding_known_bad"] = _mean(
        [metrics[a]["score_excluding_known_bad"] for a in ABILITIES]
    )
    metrics["overall"] = overall
    return metrics


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------

JUDGE_TASK = "judge"
EQUIVALENCE_TASK = "equivalence"
JUDGE_PROMPT_VERSION = "beam-judge-v1"


def evidence_recall(source_chat_ids: Sequence[int], reached: Sequence[int]) -> float | None:
    """Share of the answer's source messages that the agent's tool results reached (None when
    the question has no source messages, as for abstention)."""
    wanted = set(source_chat_ids)
    if not wanted:
        return None
    return len(wanted & set(reached)) / len(wanted)


def scorer_present(params: JudgeParams) -> bool:
    """Whether the fetch stage has put both pinned scorer files in place."""
    return all(
        scorer_file_path(params, pinned).is_file()
        for pinned in (params.prompts, params.compute_metrics)
    )


def load_prompts(params: JudgeParams) -> JudgePrompts:
    """The scorer's prompts from the fetched pinned files, after checking their hashes."""
    texts = []
    for pinned in (params.prompts, params.compute_metrics):
        path = scorer_file_path(params, pinned)
        if not path.is_file():
            raise DataError(f"scorer file {path} is missing: run `dvc repro fetch`")
        data = path.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != pinned.sha256:
            raise IntegrityError(
                f"{path}: sha256 {actual} differs from the pin {pinned.sha256} "
                f"({params.scorer_repo}@{params.scorer_commit}:{pinned.path}); "
                "run `dvc repro fetch`"
            )
        texts.append(data.decode("utf-8"))
    return extract_judge_prompts(
        texts[0],
        texts[1],
        prompts_source=params.prompts.path,
        compute_metrics_source=params.compute_metrics.path,
    )


def _request(messages: list[Message], task: str) -> ChatRequest:
    """Item verdicts are validated as JudgeVerdict (a reply without one is asked for again); the
    benchmark's prompt asks for that JSON itself, so no schema text is added to it."""
    return ChatRequest(
        messages=tuple(LlmMessage.model_validate(m) for m in messages),
        task=task,
        prompt_version=JUDGE_PROMPT_VERSION,
        schema=JudgeVerdict if task == JUDGE_TASK else None,
        instruct_schema=False,
    )


def item_request(messages: list[Message]) -> ChatRequest:
    """The request of one rubric item's verdict (also the judge check's, stages/judge_check.py)."""
    return _request(messages, JUDGE_TASK)


def _key(messages: list[Message]) -> str:
    return json.dumps(messages, sort_keys=True)
