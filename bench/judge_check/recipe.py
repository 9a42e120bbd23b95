"""The pinned recipe of the judge check (params `judge_check.recipe`): which rubric items, kinds,
seeds and donors make the cases, with each built case's sha256, validated from the fixture's
bytes; and the rubric items it names, read from the repaired release's bytes. No dataset text
is in the recipe."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, ValidationError

from bench.repair import load_table
from bench.slice import normalize_ids, parse_probing, split_question_id
from schemas.base import Record
from schemas.errors import DataError, ParamsError
from schemas.judge_check import Kind
from schemas.records import Question, Rubric

MAKE_RECIPE_COMMAND = "uv run --frozen python -m stages.judge_check --make-recipe"


def recipe_about(tier: str) -> str:
    """The recipe's `about`: what it holds, where it was drawn from and how to draw it again."""
    return (
        "Facts, not code: the judge check's calibration recipe (stages/judge_check.py says how "
        "each kind is built and why its label holds). Each case names a rubric item of the BEAM "
        f"{tier} release by question id and item index, its kind, the seed of its random "
        "choices and, for other_fact and buried, the donor items [question id, item index]; "
        "sha256 is that of the built case. No dataset text is kept here: the cases are built at "
        "run time from the repaired release. Drawn from the public repository's copy of the data "
        "(../shared/beam, BEAM commit b2a3ee8ba12d68f83143dda191097dc3e028ddd3). On a hash "
        f"mismatch, after a person has looked, draw it again with `{MAKE_RECIPE_COMMAND}`."
    )


class RecipeEntry(Record):
    kind: Kind
    question_id: str
    item_index: int = Field(ge=0)
    seed: int = Field(ge=0)
    donors: list[tuple[str, int]] = Field(default_factory=list)
    """other_fact: the one item whose statement is the answer; buried: the items around it."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Recipe(Record):
    about: str
    seed: int
    n_per_kind: int = Field(ge=1)
    cases: list[RecipeEntry]


def parse_recipe(data: bytes, source: str) -> Recipe:
    """The recipe from the fixture's bytes (a ParamsError naming `source` when it is invalid)."""
    try:
        return Recipe.model_validate_json(data)
    except ValidationError as exc:
        raise ParamsError(f"judge check recipe {source} is invalid: {exc}") from exc


def recipe_question_ids(recipe: Recipe) -> list[str]:
    """Every question the recipe names, its donors' included, each once in recipe order."""
    ids = [e.question_id for e in recipe.cases]
    ids += [q for e in recipe.cases for q, _ in e.donors]
    return list(dict.fromkeys(ids))


def read_items(
    data: bytes, source: str, question_ids: Iterable[str]
) -> tuple[list[Rubric], list[Question]]:
    """The rubrics and questions of `question_ids` from the repaired parquet's bytes (any mode)."""
    columns = ("conversation_id", "probing_questions")
    table = load_table(data, source, columns).select(list(columns))
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
