"""The benchmark's scorer prompts: taken from its pinned source files, and filled per call.

The prompts are taken from the two pinned files (src/prompts.py, src/evaluation/
compute_metrics.py of the benchmark's repository, fetched and hash-checked) by parsing them
with `ast`, never importing or executing them (the stages read the files: stages/common.py
`load_scorer_prompts`). One defect of the benchmark's own scorer is
corrected here: its code never fills the judge prompt's `<question>` slot (the prompt asks
whether the response addresses "the QUESTION" that it is never shown): we fill it, and where
the pinned text has no slot we add a `QUESTION:` line above the rubric criterion.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from schemas.errors import IntegrityError
from schemas.judging import JudgePrompts
from schemas.params import JudgeParams, PinnedFile

ITEM_PROMPT_NAME = "unified_llm_judge_base_prompt"
EQUIVALENCE_FUNCTION = "llm_equivalence"
QUESTION = "<question>"
RUBRIC_ITEM = "<rubric_item>"
LLM_RESPONSE = "<llm_response>"
FIRST = "<first>"
SECOND = "<second>"

Message = dict[str, str]
"""A chat message as the model layer takes it: {"role": "system" | "user", "content": ...}."""

_MAX_NESTING = 50


# ---------------------------------------------------------------------------------------------
# Pinned files
# ---------------------------------------------------------------------------------------------


def scorer_file_path(folder: Path, pinned: PinnedFile) -> Path:
    """Where a pinned scorer file lives once fetched: `<folder>/<path in the repository>`."""
    return folder / pinned.path


def pinned_scorer_files(params: JudgeParams) -> tuple[PinnedFile, PinnedFile]:
    """The two pinned scorer files: the prompts, then compute_metrics."""
    return params.prompts, params.compute_metrics


def prompts_from_files(
    params: JudgeParams, folder: Path, contents: Sequence[bytes]
) -> JudgePrompts:
    """The scorer's prompts from the bytes of the pinned files fetched into `folder` (in
    `pinned_scorer_files` order), after checking their hashes."""
    texts = []
    for pinned, data in zip(pinned_scorer_files(params), contents, strict=True):
        path = scorer_file_path(folder, pinned)
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
                    "expected shape: check the commit in pins.yaml (section judge)."
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
        "not the expected shape: check the commit in pins.yaml (section judge)."
    )


def _require(text: str, needed: Sequence[str], *, source: str, what: str) -> None:
    missing = [p for p in needed if p not in text]
    if missing:
        raise IntegrityError(
            f"{source}: {what} lacks the placeholder(s) {', '.join(missing)}; expected the "
            "benchmark's scorer text. Check the pinned commit in pins.yaml (section judge)."
        )


def extract_item_prompt(prompts_py_text: str, *, source: str = "src/prompts.py") -> str:
    """`unified_llm_judge_base_prompt`, verbatim, from the text of the benchmark's prompts.py."""
    module = _parse(prompts_py_text, source)
    scope = _bindings(module.body)
    if ITEM_PROMPT_NAME not in scope:
        raise IntegrityError(
            f"{source}: no module-level assignment to {ITEM_PROMPT_NAME}; expected the "
            "benchmark's prompts file. Check the pinned commit in pins.yaml (section judge)."
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
            "compute_metrics file. Check the pinned commit in pins.yaml (section judge)."
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
            "benchmark's llm_equivalence. Check the pinned commit in pins.yaml (section judge)."
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
            "system and one user message. Check the pinned commit in pins.yaml (section judge)."
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
