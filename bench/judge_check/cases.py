"""The calibration cases: how each kind's answer is built from a rubric item's statement (its
label holds by construction), the recipe's cases built and checked against their sha256, a
recipe drawn from the rubric items (`make_recipe`) and cut to a mode's size (`draw_cases`). Pure."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench.judge_check.alteration import (
    alter,
    as_sentence,
    key_tokens,
    overlap,
    seeded_choice,
    statement_of,
    words,
)
from bench.judge_check.recipe import MAKE_RECIPE_COMMAND, Recipe, RecipeEntry, recipe_about
from bench.slice import split_question_id
from schemas.base import Record
from schemas.errors import IntegrityError, ParamsError
from schemas.judge_check import KINDS, Kind
from schemas.records import ABILITIES, Ability, Question, Rubric

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
_SEED_TRIES = 20


class CalibrationCase(Record):
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


def case_sha256(fields: Mapping[str, Any]) -> str:
    """sha256 of a case's fields (sha256 itself excluded) as sorted, compact JSON."""
    body = {k: v for k, v in fields.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
        return EMPTY_ANSWERS[seeded_choice(seed, "empty", len(EMPTY_ANSWERS))]
    if len(donors) != BURIED_DONORS or not all(
        _donor_ok(statement, d) and len(words(d)) >= BURIED_DONOR_MIN_WORDS for d in donors
    ):
        return None
    position = 1 + seeded_choice(seed, "position", len(donors) - 1)  # never first, never last
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
    rubrics: Sequence[Rubric],
    questions: Sequence[Question],
    n_per_kind: int,
    seed: int,
    tier: str = "100K",
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
    return Recipe(about=recipe_about(tier), seed=seed, n_per_kind=n_per_kind, cases=entries)


def draw_cases(recipe: Recipe, count: int) -> Recipe:
    """The recipe cut to `count` cases (pins.yaml `judge_check.cases` of the mode): the kinds take
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
