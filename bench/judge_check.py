"""judge-check: how the judge model scores answers whose right score is known by construction.

The judge is the benchmark: the same answers get scores 2x apart under different judges. Before a
judge model's scores are trusted, this stage puts it through a calibration set built from the
rubrics themselves and reports how often it gives the known score.

Produces `data/judge_check/cases.jsonl` (`CalibrationCase`: question, rubric item, the built
answer, the expected score), `data/judge_check/results.jsonl` (`CheckResult`: the judge's score,
reason and reply per case), `data/judge_check/summary.json` (`summarize_check`: agreement overall
and per kind, the expected x given confusion, the parse-failure rate), `data/judge_check/run.json`
(the judge model), `metrics/usage/judge_check.json` and `metrics/judge_check.json` (a handful of
numbers). The stage does not decide pass or fail: `judge_warning(summary, min_agreement)` does,
for the stage's log and the report.

Where the rubric items come from
--------------------------------
From the repaired release parquet (`data/repair/dataset.parquet`), every question the recipe
names, whatever the mode: `data/slice/rubrics.jsonl` holds only the current mode's questions (two
in lite), so the same check would differ between modes. The recipe was drawn from the questions
of the slice fixture's full mode (the ones the benchmark scores). No dataset text is in the repo:
`fixtures/judge_check.json` holds the recipe only (question id, item index, kind, seed, donor
items) and each built case's sha256. A case whose hash differs stops the stage (IntegrityError
naming it): the rubric text changed, or the recipe is wrong. After a person has looked, the
recipe is drawn again with `python -m stages.judge_check --make-recipe`.

Items used: those of the abilities whose items are facts an answer states (contradiction
resolution, information extraction, knowledge update, multi-session reasoning, summarization,
temporal reasoning), with an `LLM response should <verb>:` lead-in. Left out: abstention (its item
*is* "there is no information": an "I don't know" answer complies), instruction and preference
following (their items are behaviours, "contains code blocks": writing the phrase down does not
comply), event ordering (scored by the equivalence judge, not the item judge).

The kinds, how each is built, and why its label holds
-----------------------------------------------------
The item's *statement* is the item with its lead-in dropped ("LLM response should state: 165
commits" -> "165 commits"); as an answer it is written as a sentence (first letter capitalized, a
full stop added).

- `stated` (1): the statement alone. The judge prompt scores 1 when the required element is
  present; the answer is that element word for word.
- `other_fact` (0): the statement of an item of a question of another conversation (the donor,
  named in the recipe). Guards: the donor shares no number, date or name with the item and at
  most a quarter of its content words, and is not the same text. It answers another question, so
  the required element is missing. May not hold where two conversations share a generic item
  ("there is contradictory information"): the guard rejects such donors.
- `altered` (0): the statement with every number, number word (one..twelve), month and weekday
  changed (names, capitalized words after the first, only where it has none of those), each
  from the case's seed: years by 3..9, days of month by at least 5 (1..28), percentages and other
  numbers out of [0.5x, 1.5x] of their value (never an equivalent form such as 4,200 vs 4.2k),
  month to another month, weekday to another weekday, name to a name from a fixed list. Guard:
  every changed token differs from its original, and no number, date or name of the original
  survives anywhere in the altered text (a date that still matches by accident, "from 65% to
  82%" with 65 turned into 82, is refused). Only short items (at most 6 content words) are used,
  so the changed value is the item's point: in a long item a changed incidental number may fairly
  be judged a "minor inaccuracy" (0.5), and such items are not used. An item with nothing to
  alter (or a version string like 0.6.2) is not buildable; the recipe holds buildable ones only.
- `empty` (0): "", "I don't know.", or another abstaining answer (chosen by the seed). No item
  used is an abstention item, so saying nothing never complies.
- `buried` (1): six statements of other conversations' items (donors, guarded as for
  `other_fact`) with the item's statement among them, never first or last, as one paragraph. The
  prompt says length and verbosity are not penalized and the element is present word for word.
  May not hold for a judge that treats off-topic facts as a non-responsive answer: that is a
  judge ignoring its prompt's style neutrality, which is what this check is for.

Every random choice is a function of the case's seed (sha256 of the seed and what is chosen),
so a build is the same on every machine and Python version.

Running it: one judge call per case, made exactly as the judge stage makes its item calls
(`item_messages` and its JudgeVerdict request), through the model layer (cache, retries, budget).
A reply with no valid verdict after the layer's retries counts as a parse failure (no score, a
disagreement); a call that failed on transport counts as a failed call, and more failed calls than
`judge_check.max_failed_share` stop the stage (exit 3), as in the other stages.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.judge import item_request
from bench.repair import load_table
from bench.scorer_prompts import item_messages
from bench.scoring import score_item, usable_reply
from bench.slice import load_fixture, normalize_ids, parse_probing, split_question_id
from clients.files import write_json
from clients.llm.port import ChatModel, ChatRequest, Completion
from clients.tokens import count_tokens
from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.judging import JudgePrompts
from schemas.records import ABILITIES, Ability, Question, Rubric

OUT_DIR = Path("data/judge_check")
METRICS = Path("metrics/judge_check.json")
MAKE_RECIPE_COMMAND = "uv run --frozen python -m stages.judge_check --make-recipe"

Kind = Literal["stated", "other_fact", "altered", "empty", "buried"]
KINDS: tuple[Kind, ...] = get_args(Kind)
EXPECTED: dict[Kind, float] = {
    "stated": 1.0,
    "other_fact": 0.0,
    "altered": 0.0,
    "empty": 0.0,
    "buried": 1.0,
}
CHECK_ABILITIES: tuple[Ability, ...] = (
    "contradiction_resolution",
    "information_extraction",
    "knowledge_update",
    "multi_session_reasoning",
    "summarization",
    "temporal_reasoning",
)
"""Abilities whose rubric items are facts an answer states (see the module docstring)."""
EMPTY_ANSWERS: tuple[str, ...] = (
    "",
    "I don't know.",
    "I don't have that information.",
    "I'm not sure; I can't recall that from our conversations.",
)
BURIED_DONORS = 6
BURIED_DONOR_MIN_WORDS = 5
"""A buried answer's other facts are sentences, not fragments like "Three"."""
ALTERED_MAX_WORDS = 6
DONOR_MAX_OVERLAP = 0.25
NAMES: tuple[str, ...] = ("Priya", "Mateo", "Hannah", "Kenji", "Amara", "Tobias", "Leila", "Ruben")
_SEED_TRIES = 20

Outcome = Literal["verdict", "no_verdict", "call_failed"]
"""verdict: the judge gave a valid score; no_verdict: its reply held no valid verdict after the
model layer's retries (a parse failure); call_failed: the call failed (transport, refused)."""

RECIPE_ABOUT = (
    "Facts, not code: the judge check's calibration recipe (stages/judge_check.py says how each "
    "kind is built and why its label holds). Each case names a rubric item of the BEAM 100K "
    "release by question id and item index, its kind, the seed of its random choices and, for "
    "other_fact and buried, the donor items [question id, item index]; sha256 is that of the "
    "built case. No dataset text is kept here: the cases are built at run time from the repaired "
    "release. Drawn from the public repository's copy of the data (../shared/beam, BEAM "
    "commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3). On a hash mismatch, after a person has "
    f"looked, draw it again with `{MAKE_RECIPE_COMMAND}`."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecipeEntry(_Strict):
    kind: Kind
    question_id: str
    item_index: int = Field(ge=0)
    seed: int = Field(ge=0)
    donors: list[tuple[str, int]] = []
    """other_fact: the one item whose statement is the answer; buried: the items around it."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Recipe(_Strict):
    about: str
    seed: int
    n_per_kind: int = Field(ge=1)
    cases: list[RecipeEntry]


class CalibrationCase(_Strict):
    """One answer whose right score for one rubric item is known by construction."""

    id: str
    """`<question id>#<item index>:<kind>`."""
    kind: Kind
    question_id: str
    ability: Ability
    item_index: int
    question: str
    rubric_item: str
    """The item as the rubric has it (lead-in included), as the judge stage sends it."""
    answer: str
    expected: float
    sha256: str
    """Of the other fields (`case_sha256`)."""


class CheckResult(_Strict):
    """The judge's score on one calibration case."""

    case_id: str
    kind: Kind
    ability: Ability
    expected: float
    given: float | None
    """The judge's score (1, 0.5, 0), or None without a verdict."""
    agrees: bool
    outcome: Outcome
    reason: str | None = None
    error: str | None = None
    reply: str | None = None


# ---------------------------------------------------------------------------------------------
# Text helpers (pure)
# ---------------------------------------------------------------------------------------------

_LEAD_IN = re.compile(r"^\s*LLM response should \w+\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:[.,'%$-][a-z0-9%]+)*%?")
_STOP_TEXT = """
a an the and or but of to in on at by for with from as is are was were be been it its this that
these those your you i my me we our their they he she his her so than then there which what who
how when where not no
"""
_STOP = frozenset(_STOP_TEXT.split())
_MONTHS_TEXT = (
    "January February March April May June July August September October November December"
)
_MONTHS = _MONTHS_TEXT.split()
_WEEKDAYS_TEXT = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
_WEEKDAYS = _WEEKDAYS_TEXT.split()
_NUMBER_WORDS_TEXT = "one two three four five six seven eight nine ten eleven twelve"
_NUMBER_WORDS = _NUMBER_WORDS_TEXT.split()
_MONTH_RE = "|".join(_MONTHS)
_TOKEN = re.compile(
    rf"(?P<version>\d+\.\d+\.\d+)"
    rf"|(?P<month>\b(?:{_MONTH_RE})\b)(?P<day>\s+\d{{1,2}}\b(?!,\d{{3}}))?"
    rf"|(?P<weekday>\b(?:{'|'.join(_WEEKDAYS)})(?=s?\b))"
    rf"|(?P<numword>\b(?i:{'|'.join(_NUMBER_WORDS)})\b)"
    r"|(?P<number>(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\d.,])\d+(?:\.\d+)?)"
    r"(?P<percent>\s*(?:%|percent(?:age)?\b))?"
)
_YEAR_BEFORE = re.compile(
    rf"(?:\b(?:{_MONTH_RE})\s+\d{{1,2}},?\s*|\b(?i:in|of|since|by|until|till|from|to)\s+)$"
)
"""What comes before a number in 1900..2100 that makes it a year ("March 15, 2024", "in 2023")."""
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]{2,}\b")
_CAPITAL_BEFORE = re.compile(r"\b[A-Z][\w'-]*[\s-]+$")
_CAPITAL_AFTER = re.compile(r"[\s-]+[A-Z]")
_NOT_NAMES = frozenset({"LLM", "You", "The", "We", "She", "They", "Based"})


def statement_of(rubric_item: str) -> str | None:
    """The item without its `LLM response should <verb>:` lead-in (None when it has none)."""
    match = _LEAD_IN.match(rubric_item)
    if match is None:
        return None
    statement = rubric_item[match.end() :].strip()
    return statement or None


def as_sentence(statement: str) -> str:
    """The statement as an answer sentence: first letter capitalized, a full stop at the end."""
    text = statement.strip()
    text = text[:1].upper() + text[1:]
    return text if text[-1:] in ".?!" else text + "."


def words(text: str) -> set[str]:
    """Lower-case content words (numbers included, `$`/commas/decimals kept inside)."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def overlap(reference: str, candidate: str) -> float:
    """Share of the reference's content words found in the candidate."""
    wanted = words(reference)
    return len(wanted & words(candidate)) / len(wanted) if wanted else 0.0


def _choice(seed: int, label: str, count: int) -> int:
    """A number in [0, count) from the seed and what it chooses: the same on every machine."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def case_sha256(fields: Mapping[str, Any]) -> str:
    """sha256 of a case's fields (sha256 itself excluded) as sorted, compact JSON."""
    body = {k: v for k, v in fields.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Altering a number, date or name (pure)
# ---------------------------------------------------------------------------------------------


_NOT_A_NUMBER_BEFORE = re.compile(
    r"\b(?i:which|no|any|each|every|this|that|the|another|some|someone|anyone)\s+$"
)


def _value_matches(text: str) -> list[re.Match[str]]:
    """The numbers, number words, months and weekdays of a text; "one" after a determiner
    ("which one", "no one") is a pronoun, not a number."""
    return [
        m
        for m in _TOKEN.finditer(text)
        if not (
            m["numword"]
            and m["numword"].lower() == "one"
            and _NOT_A_NUMBER_BEFORE.search(text[: m.start()])
        )
    ]


def key_tokens(text: str, *, names: bool = True) -> set[str]:
    """The numbers (as values), number words, months, weekdays and (with `names`) names of a
    text, normalized: what an altered statement must share none of with its original."""
    found: set[str] = set()
    for match in _value_matches(text):
        if match["month"]:
            found.add(match["month"].lower())
            if match["day"]:
                found.add(str(int(match["day"])))
        elif match["weekday"]:
            found.add(match["weekday"].lower())
        elif match["numword"]:
            found.add(str(_NUMBER_WORDS.index(match["numword"].lower()) + 1))
        elif match["number"]:
            found.add(_number_key(match["number"]))
        elif match["version"]:
            found.add(match["version"])
    if names:
        found |= {n.lower() for n in _names(text)}
    return found


def _number_key(text: str) -> str:
    value = float(text.replace(",", ""))
    return str(int(value)) if value.is_integer() else repr(value)


def _names(text: str, *, isolated: bool = False) -> list[str]:
    """Capitalized words after the first word that are not months, weekdays or stock words;
    with `isolated`, only those with no capitalized word beside them (a person's first name,
    not one word of "Google Calendar", where a changed word leaves a half-right name)."""
    found = []
    for match in _CAPITALIZED.finditer(text):
        word = match.group(0)
        base = word[:-1] if word.endswith("s") and word[:-1] in _WEEKDAYS else word
        if match.start() == 0 or base in _MONTHS or base in _WEEKDAYS or word in _NOT_NAMES:
            continue
        beside = _CAPITAL_BEFORE.search(text[: match.start()]) or _CAPITAL_AFTER.match(
            text[match.end() :]
        )
        if isolated and beside:
            continue
        found.append(word)
    return found


def _far_values(value: float, low: int, high: int) -> list[int]:
    """Integers in [low, high] outside [0.5 v, 1.5 v]: never a near miss a judge may forgive."""
    return [c for c in range(low, high + 1) if c < 0.5 * value or c > 1.5 * value]


def _format_number(value: float, like: str) -> str:
    decimals = len(like.split(".", 1)[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}" if "," in like else f"{value:.{decimals}f}"
    return text


def _new_number(original: str, percent: bool, year: bool, seed: int, label: str) -> str | None:
    value = float(original.replace(",", ""))
    if year:
        shift = (3, 4, 5, 6, 7, 8, 9, -3, -4, -5, -6, -7, -8, -9)
        return str(int(value) + shift[_choice(seed, label, len(shift))])
    if percent:
        options = _far_values(value, 5, 100)
        return str(options[_choice(seed, label, len(options))]) if options else None
    factor = (3, 4, 5, 6)[_choice(seed, label, 4)]
    return _format_number(value * factor if value else factor, original)


def _replacement(
    group: str, match: re.Match[str], statement: str, seed: int, label: str
) -> str | None:
    """The new text of one matched value (`group`: month, day, weekday, numword or number);
    None when no replacement fits."""
    original = key_tokens(statement, names=False)

    def pick(options: Sequence[str]) -> str | None:
        return options[_choice(seed, label, len(options))] if options else None

    old = match[group]
    if group == "weekday":
        return pick([w for w in _WEEKDAYS if w.lower() not in original])
    if group == "month":
        return pick([m for m in _MONTHS if m.lower() not in original])
    if group == "day":
        day = int(old)
        return pick([f" {d}" for d in range(1, 29) if abs(d - day) >= 5 and str(d) not in original])
    if group == "numword":
        value = _NUMBER_WORDS.index(old.lower()) + 1
        far = [_NUMBER_WORDS[v - 1] for v in _far_values(value, 1, 12) if str(v) not in original]
        new = pick(far)
        return None if new is None else new.capitalize() if old[0].isupper() else new
    year = (
        old.isdigit()
        and 1900 <= int(old) <= 2100
        and _YEAR_BEFORE.search(statement[: match.start()]) is not None
    )
    return _new_number(old, bool(match["percent"]), year, seed, label)


def alter(statement: str, seed: int) -> str | None:
    """The statement with every number, number word, month and weekday changed (its names
    where it has none of those), or None when there is nothing to alter, a version string,
    or no replacement that leaves none of the original's values in the text. The same value
    is changed the same way wherever it occurs."""
    matches = _value_matches(statement)
    if any(m["version"] for m in matches):
        return None
    edits: list[tuple[int, int, str]] = []  # (start, end, new text)
    chosen: dict[str, str | None] = {}
    for index, match in enumerate(matches):
        spans = [g for g in ("month", "day", "weekday", "numword", "number") if match[g]]
        for group in spans:
            key = f"{group}:{match[group].strip().lower()}"
            if key not in chosen:
                chosen[key] = _replacement(group, match, statement, seed, f"{index}{group}")
            new = chosen[key]
            if new is None:
                return None
            edits.append((match.start(group), match.end(group), new))
    original = key_tokens(statement, names=False)
    if not edits:  # no number or date: change the names, if any
        original = key_tokens(statement)
        pool = [n for n in NAMES if n.lower() not in original]
        for position, name in enumerate(sorted(set(_names(statement, isolated=True)))):
            new = pool[(_choice(seed, name, len(pool)) + position) % len(pool)]
            edits += [(m.start(), m.end(), new) for m in re.finditer(rf"\b{name}\b", statement)]
    if not edits:
        return None
    altered = statement
    for start, end, new in sorted(edits, reverse=True):
        if altered[start:end].strip().lower() == new.strip().lower():
            return None
        altered = altered[:start] + new + altered[end:]
    if altered == statement or key_tokens(altered) & original:
        return None  # a value of the original survives: the label would not hold
    return altered


# ---------------------------------------------------------------------------------------------
# Building the cases (pure)
# ---------------------------------------------------------------------------------------------


def _donor_ok(statement: str, donor: str) -> bool:
    """A donor statement says something else: not the same text, no shared number, date or
    name, at most a quarter of the item's content words."""
    if donor.strip().lower() == statement.strip().lower():
        return False
    if key_tokens(statement) & key_tokens(donor):
        return False
    return overlap(statement, donor) <= DONOR_MAX_OVERLAP


def build_answer(kind: Kind, statement: str, seed: int, donors: Sequence[str]) -> str | None:
    """The answer of one case from the item's statement, its seed and its donors' statements
    (None when the kind cannot be built from them)."""
    if kind == "stated":
        return as_sentence(statement)
    if kind == "other_fact":
        if len(donors) != 1 or not _donor_ok(statement, donors[0]):
            return None
        return as_sentence(donors[0])
    if kind == "altered":
        if len(words(statement)) > ALTERED_MAX_WORDS:
            return None
        altered = alter(statement, seed)
        return None if altered is None else as_sentence(altered)
    if kind == "empty":
        return EMPTY_ANSWERS[_choice(seed, "empty", len(EMPTY_ANSWERS))]
    if len(donors) != BURIED_DONORS or not all(
        _donor_ok(statement, d) and len(words(d)) >= BURIED_DONOR_MIN_WORDS for d in donors
    ):
        return None
    position = 1 + _choice(seed, "position", len(donors) - 1)  # never first, never last
    sentences = [as_sentence(d) for d in donors]
    sentences.insert(position, as_sentence(statement))
    return " ".join(sentences)


def _case(
    kind: Kind,
    question: Question,
    rubric: Rubric,
    item_index: int,
    answer: str,
) -> CalibrationCase:
    fields: dict[str, Any] = {
        "id": f"{question.id}#{item_index}:{kind}",
        "kind": kind,
        "question_id": question.id,
        "ability": question.ability,
        "item_index": item_index,
        "question": question.question,
        "rubric_item": rubric.rubric[item_index],
        "answer": answer,
        "expected": EXPECTED[kind],
    }
    return CalibrationCase(**fields, sha256=case_sha256(fields))


class _Items:
    """Questions and rubric items by id, with the lookups a build needs."""

    def __init__(self, rubrics: Sequence[Rubric], questions: Sequence[Question]) -> None:
        self.rubrics = {r.question_id: r for r in rubrics}
        self.questions = {q.id: q for q in questions}

    def item(self, question_id: str, index: int, where: str) -> tuple[Question, Rubric, str]:
        question, rubric = self.questions.get(question_id), self.rubrics.get(question_id)
        if question is None or rubric is None:
            raise IntegrityError(
                f"{where}: the dataset has no question {question_id}; the dataset changed or "
                f"the recipe is wrong. After a person has looked: `{MAKE_RECIPE_COMMAND}`"
            )
        if index >= len(rubric.rubric):
            raise IntegrityError(
                f"{where}: question {question_id} has {len(rubric.rubric)} rubric item(s), the "
                f"recipe names item {index}; the dataset changed or the recipe is wrong. After "
                f"a person has looked: `{MAKE_RECIPE_COMMAND}`"
            )
        statement = statement_of(rubric.rubric[index])
        if statement is None:
            raise IntegrityError(
                f"{where}: item {index} of {question_id} has no `LLM response should ...:` "
                "lead-in; the dataset changed or the recipe is wrong. After a person has "
                f"looked: `{MAKE_RECIPE_COMMAND}`"
            )
        return question, rubric, statement


def build_cases(
    recipe: Recipe, rubrics: Sequence[Rubric], questions: Sequence[Question]
) -> list[CalibrationCase]:
    """The recipe's cases from the rubrics and questions, each checked against its sha256
    (IntegrityError naming every case that differs or cannot be built)."""
    items = _Items(rubrics, questions)
    cases: list[CalibrationCase] = []
    problems: list[str] = []
    for entry in recipe.cases:
        where = f"judge check case {entry.question_id}#{entry.item_index}:{entry.kind}"
        question, rubric, statement = items.item(entry.question_id, entry.item_index, where)
        donors = [items.item(q, i, f"{where} (donor {q}#{i})")[2] for q, i in entry.donors]
        answer = build_answer(entry.kind, statement, entry.seed, donors)
        if answer is None:
            problems.append(f"{where} cannot be built from the item as it now reads")
            continue
        case = _case(entry.kind, question, rubric, entry.item_index, answer)
        if case.sha256 != entry.sha256:
            problems.append(f"{case.id}: sha256 {case.sha256}, the recipe pins {entry.sha256}")
            continue
        cases.append(case)
    if problems:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" * (len(problems) > 5))
        raise IntegrityError(
            f"{len(problems)} judge check case(s) differ from the recipe: {shown}. The dataset's "
            "rubric text changed, or the recipe is wrong. After a person has looked, draw the "
            f"recipe again with `{MAKE_RECIPE_COMMAND}`"
        )
    return cases


def eligible_items(
    rubrics: Sequence[Rubric], questions: Sequence[Question]
) -> list[tuple[Question, int, str]]:
    """(question, item index, statement) of every item the check may use."""
    by_id = {q.id: q for q in questions}
    found = []
    for rubric in rubrics:
        question = by_id.get(rubric.question_id)
        if question is None or rubric.ability not in CHECK_ABILITIES:
            continue
        for index, item in enumerate(rubric.rubric):
            statement = statement_of(item)
            if statement is not None and words(statement):
                found.append((question, index, statement))
    return found


def _spread(
    candidates: Sequence[tuple[Question, int, str]], rng: random.Random
) -> list[tuple[Question, int, str]]:
    """The candidates in an order that takes each ability in turn and, within one, each question
    in turn before a second item of any: many questions and abilities in the first n."""
    by_ability: dict[str, dict[str, list[tuple[Question, int, str]]]] = {}
    for candidate in candidates:
        by_ability.setdefault(candidate[0].ability, {}).setdefault(candidate[0].id, [])
        by_ability[candidate[0].ability][candidate[0].id].append(candidate)
    lanes: list[list[tuple[Question, int, str]]] = []
    for ability in ABILITIES:
        per_question = list(by_ability.get(ability, {}).values())
        rng.shuffle(per_question)
        for group in per_question:
            rng.shuffle(group)
        lane = [
            g[k]
            for k in range(max(map(len, per_question), default=0))
            for g in per_question
            if k < len(g)
        ]
        lanes.append(lane)
    return [
        lane[k] for k in range(max(map(len, lanes), default=0)) for lane in lanes if k < len(lane)
    ]


def _alterable(statement: str) -> bool:
    """Short enough for `altered`, with something to alter under one of the first seeds."""
    return len(words(statement)) <= ALTERED_MAX_WORDS and any(
        alter(statement, seed) is not None for seed in range(_SEED_TRIES)
    )


def make_recipe(
    rubrics: Sequence[Rubric], questions: Sequence[Question], n_per_kind: int, seed: int
) -> Recipe:
    """Draw a recipe: `n_per_kind` buildable cases of each kind, spread over abilities and
    questions, donors from other conversations. Used once to write the fixture."""
    rng = random.Random(seed)
    pool = eligible_items(rubrics, questions)
    entries: list[RecipeEntry] = []
    by_id = {q.id: q for q in questions}
    rubric_of = {r.question_id: r for r in rubrics}
    for kind in KINDS:
        taken = 0
        candidates = [c for c in pool if kind != "altered" or _alterable(c[2])]
        for question, index, statement in _spread(candidates, rng):
            if taken == n_per_kind:
                break
            donors: list[tuple[str, int]] = []
            if kind in ("other_fact", "buried"):
                shortest = 1 if kind == "other_fact" else BURIED_DONOR_MIN_WORDS
                others = [
                    (q.id, i, s)
                    for q, i, s in pool
                    if q.conversation_id != question.conversation_id
                    and _donor_ok(statement, s)
                    and len(words(s)) >= shortest
                ]
                unique: dict[str, tuple[str, int]] = {}
                for q_id, i, s in others:
                    unique.setdefault(s.strip().lower(), (q_id, i))
                need = 1 if kind == "other_fact" else BURIED_DONORS
                if len(unique) < need:
                    continue
                donors = rng.sample(sorted(unique.values()), need)
            donor_texts = [statement_of(rubric_of[q].rubric[i]) or "" for q, i in donors]
            built: tuple[int, str] | None = None
            for _ in range(_SEED_TRIES if kind == "altered" else 1):
                case_seed = rng.getrandbits(32)
                answer = build_answer(kind, statement, case_seed, donor_texts)
                if answer is not None:
                    built = case_seed, answer
                    break
            if built is None:
                continue
            case_seed, answer = built
            case = _case(kind, by_id[question.id], rubric_of[question.id], index, answer)
            entries.append(
                RecipeEntry(
                    kind=kind,
                    question_id=question.id,
                    item_index=index,
                    seed=case_seed,
                    donors=donors,
                    sha256=case.sha256,
                )
            )
            taken += 1
    return Recipe(about=RECIPE_ABOUT, seed=seed, n_per_kind=n_per_kind, cases=entries)


# ---------------------------------------------------------------------------------------------
# Running the check
# ---------------------------------------------------------------------------------------------


def case_request(case: CalibrationCase, prompts: JudgePrompts) -> ChatRequest:
    """The judge stage's own item request for the case's question, item and answer."""
    return item_request(item_messages(prompts, case.question, case.rubric_item, case.answer))


def result_of(case: CalibrationCase, completion: Completion) -> CheckResult:
    """The judge's score on one case, read as the judge stage reads it (`score_item`)."""
    base: dict[str, Any] = {
        "case_id": case.id,
        "kind": case.kind,
        "ability": case.ability,
        "expected": case.expected,
    }
    reply, failure = usable_reply(completion)
    if reply is None:  # a failed call, or a reply that is unusable or cut at max_tokens
        failed = completion.error is not None and completion.failure != "unusable"
        outcome: Outcome = "call_failed" if failed else "no_verdict"
        return CheckResult(**base, given=None, agrees=False, outcome=outcome, error=failure)
    item = score_item(case.rubric_item, reply)
    if item.parse_error:
        return CheckResult(
            **base,
            given=None,
            agrees=False,
            outcome="no_verdict",
            error=item.error,
            reply=item.reply,
        )
    return CheckResult(
        **base,
        given=item.score,
        agrees=item.score == case.expected,
        outcome="verdict",
        reason=item.reason,
        reply=item.reply,
    )


def run_check(
    cases: Sequence[CalibrationCase], judge: ChatModel, prompts: JudgePrompts
) -> list[CheckResult]:
    """One judge call per case, as one concurrent batch (cached like any call); results in the
    cases' order."""
    completions = judge.run_batch([case_request(c, prompts) for c in cases])
    return [result_of(c, done) for c, done in zip(cases, completions, strict=True)]


def _value_key(value: float | None) -> str:
    return "none" if value is None else {1.0: "1", 0.5: "0_5", 0.0: "0"}[value]


def summarize_check(results: Sequence[CheckResult]) -> dict[str, Any]:
    """Numbers only, the same keys whatever the results: `cases` and `agreement` (share of cases
    given their expected score) overall and per kind (0 for a kind with no case), `confusion`
    (`expected_<1|0>_given_<1|0_5|0|none>` counts; no case expects 0.5), `parse_failure_rate`
    (cases whose reply held no valid verdict after the layer's retries, over all cases) and
    `failed_calls`."""

    def share(members: Sequence[CheckResult]) -> float:
        return sum(r.agrees for r in members) / len(members) if members else 0.0

    groups: dict[str, list[CheckResult]] = {"overall": list(results)}
    groups |= {kind: [r for r in results if r.kind == kind] for kind in KINDS}
    confusion = {
        f"expected_{_value_key(e)}_given_{_value_key(g)}": sum(
            r.expected == e and r.given == g for r in results
        )
        for e in (1.0, 0.0)
        for g in (1.0, 0.5, 0.0, None)
    }
    return {
        "cases": {name: len(members) for name, members in groups.items()},
        "agreement": {name: share(members) for name, members in groups.items()},
        "confusion": confusion,
        "parse_failure_rate": (
            sum(r.outcome == "no_verdict" for r in results) / len(results) if results else 0.0
        ),
        "failed_calls": sum(r.outcome == "call_failed" for r in results),
    }


def judge_warning(summary: Mapping[str, Any], min_agreement: float) -> str | None:
    """A warning when the judge agrees with the known scores less often than `min_agreement`
    (None: no warning), naming the kinds it gets most wrong."""
    overall = float(summary["agreement"]["overall"])
    if overall >= min_agreement:
        return None
    weakest = sorted(
        (k for k in KINDS if summary["cases"][k]), key=lambda k: summary["agreement"][k]
    )[:2]
    detail = ", ".join(f"{k} {summary['agreement'][k]:.0%}" for k in weakest)
    return (
        f"the judge gave the known score on {overall:.0%} of {summary['cases']['overall']} "
        f"calibration cases, below judge_check.min_agreement {min_agreement:.0%} (weakest: "
        f"{detail}); its scores of the memory system are not to be trusted"
    )


# ---------------------------------------------------------------------------------------------
# Reading the data and the recipe
# ---------------------------------------------------------------------------------------------


def read_items(source: Path, question_ids: Iterable[str]) -> tuple[list[Rubric], list[Question]]:
    """The rubrics and questions of `question_ids` from the repaired parquet (any mode)."""
    try:
        data = source.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{source} not found: run `dvc repro repair` first") from exc
    columns = ("conversation_id", "probing_questions")
    table = load_table(data, str(source), columns).select(list(columns))
    rows = {str(r["conversation_id"]): r["probing_questions"] for r in table.to_pylist()}
    parsed: dict[str, dict[str, list[dict[str, Any]]]] = {}
    rubrics: list[Rubric] = []
    questions: list[Question] = []
    for question_id in dict.fromkeys(question_ids):
        conv, ability, index = split_question_id(question_id)
        if conv not in rows:
            continue  # build_cases names the case that needs it
        if conv not in parsed:
            parsed[conv] = parse_probing(rows[conv], f"conversation {conv}")
        items = parsed[conv].get(ability, [])
        if index >= len(items):
            continue
        item = items[index]
        text, rubric = item.get("question"), item.get("rubric")
        if not isinstance(text, str) or not isinstance(rubric, list):
            raise DataError(f"question {question_id}: no question text or rubric list")
        questions.append(
            Question(
                id=question_id, conversation_id=conv, ability=ability, index=index, question=text
            )
        )
        rubrics.append(
            Rubric(
                question_id=question_id,
                ability=ability,
                rubric=[str(r) for r in rubric],
                source_chat_ids=normalize_ids(item.get("source_chat_ids"), question_id),
            )
        )
    return rubrics, questions


def recipe_question_ids(recipe: Recipe) -> list[str]:
    ids = [e.question_id for e in recipe.cases]
    ids += [q for e in recipe.cases for q, _ in e.donors]
    return list(dict.fromkeys(ids))


def draw_cases(recipe: Recipe, count: int) -> Recipe:
    """The recipe cut to `count` cases (params `judge_check.cases` of the mode): the kinds take
    turns, and each turn takes the kind's first remaining entry (recipe order) of the abilities
    drawn least so far, so every kind has a case once `count` reaches the number of kinds, the
    kinds differ by at most one case and the abilities are spread over the draw. The cases keep
    the recipe's order; a count at or above the recipe's size is the whole recipe, unchanged."""
    if count < 1:
        raise ParamsError(f"judge_check.cases must be at least 1, got {count}")
    if count >= len(recipe.cases):
        return recipe
    ability = [split_question_id(e.question_id)[1] for e in recipe.cases]
    lanes = [[i for i, e in enumerate(recipe.cases) if e.kind == kind] for kind in KINDS]
    drawn: Counter[str] = Counter()
    chosen: set[int] = set()
    while len(chosen) < count:
        for lane in lanes:
            if lane and len(chosen) < count:
                pick = min(lane, key=lambda i: (drawn[ability[i]], i))
                lane.remove(pick)
                chosen.add(pick)
                drawn[ability[pick]] += 1
    return recipe.model_copy(
        update={"cases": [e for i, e in enumerate(recipe.cases) if i in chosen]}
    )


def load_recipe(path: Path) -> Recipe:
    try:
        return Recipe.model_validate_json(path.read_bytes())
    except FileNotFoundError as exc:
        raise ParamsError(
            f"judge check recipe {path} not found (params judge_check.recipe); draw one with "
            f"`{MAKE_RECIPE_COMMAND}`"
        ) from exc
    except ValidationError as exc:
        raise ParamsError(f"judge check recipe {path} is invalid: {exc}") from exc


def write_recipe(
    source: Path, slice_fixture: Path, out: Path, *, n_per_kind: int, seed: int
) -> Recipe:
    """Draw a recipe from the slice fixture's full-mode questions and write it to `out`."""
    fixture = load_fixture(slice_fixture)
    if "full" not in fixture.modes:
        raise ParamsError(f"slice fixture {slice_fixture} has no full mode to draw questions from")
    rubrics, questions = read_items(source, fixture.modes["full"].question_ids)
    recipe = make_recipe(rubrics, questions, n_per_kind, seed)
    write_json(out, recipe.model_dump(mode="json"))
    return recipe


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


def estimate_tokens(
    cases: Sequence[CalibrationCase], prompts: JudgePrompts, completion_tokens: float
) -> int:
    """Tokens of the check's calls: each prompt as sent, plus the expected reply."""
    return sum(
        count_tokens(m["content"])
        for c in cases
        for m in item_messages(prompts, c.question, c.rubric_item, c.answer)
    ) + math.ceil(completion_tokens * len(cases))
