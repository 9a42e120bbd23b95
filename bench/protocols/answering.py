"""Answer protocols (params `answer.protocol`): what the answerer is given with each question.

- beam (the default): the benchmark's own; the answerer sees the question alone.
- exabase: ExaBase's answer protocol, as pastdotdev/benchmarks runs it. Its `answer_prompt(query,
  context, cat, meta)` (beam/exabase_prompts.py at the pin of pins.yaml
  `judge.protocol_sources.exabase`) adds guidance per ability, and part of it is built from the
  dataset's judge-side annotations (`Rubric.annotations`: why_unanswerable, ordering_tested,
  time_points + calculation_required, preference_being_tested, instruction_being_tested +
  compliance_indicators; the rubric's items for summarization). Leaky by design: the run's
  record, page and metrics say the answerer saw judge-side annotations, and compare pairs such a
  run only with runs of the same protocol.

The guidance is ExaBase's own function's output: the pinned file (hash-checked against the pin
first, `check_source`) is executed as a module of its own and `answer_prompt` called, with the
question's ability and the annotations it reads as `meta`. Its branches (which annotation, how it
is joined, the summarization items cut past `: `) are code, not a template, so calling it is the
faithful way to get exactly its text without copying it here (its file carries no licence to
copy). The file defines string functions and constants only; nothing else of it runs.

Only the guidance is taken, not ExaBase's whole prompt: it is the part of `answer_prompt`'s
output that differs from the output for an unknown category (whose guidance is empty), so each
system keeps its own instructions, context layout and retrieval (systems/one_shot.py places it
just before the question; the agent loop before the question in its first user turn), and every
system (one-shot, agent loop, the peers) receives it the same way. What differs from ExaBase's
run: its frame (`You are a helpful assistant ... Retrieved Context:`, the context after the
question), its retrieval and its answer model (past.dev's openai/gpt-5.6-luna).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bench.protocols.base import module_function, parse_source
from bench.protocols.exabase import PROMPTS_FILE
from schemas.errors import IntegrityError
from schemas.records import Question, Rubric

ANSWER_FUNCTION = "answer_prompt"
_QUERY = "\x00query\x00"
_CONTEXT = "\x00context\x00"
_NO_CATEGORY = "\x00none\x00"

AnswerPrompt = Callable[[str, str, str, dict[str, object]], str]


def load_answer_prompt(texts: Mapping[str, str]) -> AnswerPrompt:
    """ExaBase's `answer_prompt`, from the pinned file's text (already hash-checked): the file is
    executed in a namespace of its own and the function taken from it."""
    text = texts[PROMPTS_FILE]
    module_function(parse_source(text, PROMPTS_FILE), ANSWER_FUNCTION, PROMPTS_FILE)
    namespace: dict[str, object] = {"__name__": "exabase_prompts"}
    exec(compile(text, PROMPTS_FILE, "exec"), namespace)
    function = namespace[ANSWER_FUNCTION]
    if not callable(function):
        raise IntegrityError(f"{PROMPTS_FILE}: {ANSWER_FUNCTION} is not a function")
    return function


def meta_of(rubric: Rubric) -> dict[str, object]:
    """The `meta` ExaBase's answer_prompt reads: the question's annotations and its rubric."""
    return {**rubric.annotations, "rubric": list(rubric.rubric)}


def guidance_text(answer_prompt: AnswerPrompt, ability: str, meta: dict[str, object]) -> str | None:
    """The guidance `answer_prompt` gives one question: its output less the frame it gives an
    unknown category (whose guidance is empty), whitespace stripped; None when it adds none."""
    try:
        full = answer_prompt(_QUERY, _CONTEXT, ability, meta)
        frame = answer_prompt(_QUERY, _CONTEXT, _NO_CATEGORY, {})
    except Exception as exc:  # their code: any failure is the pinned file's
        raise IntegrityError(
            f"{PROMPTS_FILE}: {ANSWER_FUNCTION}() failed for {ability}: {exc!r}; check the pin "
            "in pins.yaml (judge.protocol_sources.exabase)"
        ) from exc
    if not isinstance(full, str) or not isinstance(frame, str):
        raise IntegrityError(f"{PROMPTS_FILE}: {ANSWER_FUNCTION}() returned no text")
    prefix = 0
    while prefix < min(len(full), len(frame)) and full[prefix] == frame[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < len(frame) - prefix
        and suffix < len(full) - prefix
        and full[-1 - suffix] == frame[-1 - suffix]
    ):
        suffix += 1
    if prefix + suffix != len(frame):
        raise IntegrityError(
            f"{PROMPTS_FILE}: {ANSWER_FUNCTION}() for {ability} is not its frame with guidance "
            "inserted; this port cannot take its guidance apart. Check the pin in pins.yaml"
        )
    guidance = full[prefix : len(full) - suffix].strip()
    if _QUERY in guidance or _CONTEXT in guidance:
        raise IntegrityError(f"{PROMPTS_FILE}: {ANSWER_FUNCTION}() puts the question in guidance")
    return guidance or None


@dataclass(frozen=True)
class ExaBaseAnswering:
    """ExaBase's answer protocol: each question with its guidance."""

    answer_prompt: AnswerPrompt

    def guide(self, questions: Sequence[Question], rubrics: Mapping[str, Rubric]) -> list[Question]:
        """The questions, each with its guidance (`Question.guidance`); a question without a
        rubric is a DataError of the slice, said by the caller's read."""
        return [
            q.model_copy(
                update={
                    "guidance": guidance_text(self.answer_prompt, q.ability, meta_of(rubrics[q.id]))
                }
            )
            for q in questions
        ]


def read_answering(texts: Mapping[str, str]) -> ExaBaseAnswering:
    """ExaBase's answer protocol from the text of its pinned files (hash-checked)."""
    return ExaBaseAnswering(load_answer_prompt(texts))
