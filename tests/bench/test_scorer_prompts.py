"""Extracting the scorer prompts from the benchmark's source files with `ast`, and filling them."""

from __future__ import annotations

import pytest

from bench.scorer_prompts import (
    equivalence_messages,
    extract_equivalence_messages,
    extract_item_prompt,
    extract_judge_prompts,
    fill_placeholders,
    item_messages,
    with_question_slot,
)
from schemas.errors import IntegrityError
from tests.support import scorer_standin as standin


def test_extracts_the_three_texts_from_the_standin_files() -> None:
    prompts = extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())
    assert prompts.item_prompt == standin.ITEM_PROMPT
    assert prompts.equivalence_system == standin.EQUIVALENCE_SYSTEM
    assert prompts.equivalence_user == standin.EQUIVALENCE_USER


def test_extraction_never_executes_the_file() -> None:
    # A file that would raise (and import a missing module) if it were run still parses.
    text = (
        "import not_a_module\nraise SystemExit(3)\n"
        'unified_llm_judge_base_prompt = "<rubric_item> <llm_response>"\n'
    )
    assert extract_item_prompt(text) == "<rubric_item> <llm_response>"


def test_item_prompt_built_from_concatenation_names_and_strip() -> None:
    text = (
        'HEAD = "Judge <rubric_item>. "\n'
        'unified_llm_judge_base_prompt = "first draft"\n'
        'unified_llm_judge_base_prompt = (HEAD + f"Answer: <llm_response>" + """ \n""").strip()\n'
    )
    assert extract_item_prompt(text) == "Judge <rubric_item>. Answer: <llm_response>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("other = 'x'\n", "no module-level assignment to unified_llm_judge_base_prompt"),
        (
            "unified_llm_judge_base_prompt = '<rubric_item> only'\n",
            "lacks the placeholder(s) <llm_response>",
        ),
        ("unified_llm_judge_base_prompt = load()\n", "is a Call expression"),
        (
            "unified_llm_judge_base_prompt = f'{x} <rubric_item> <llm_response>'\n",
            "f-string with a field",
        ),
        ("unified_llm_judge_base_prompt = '''unterminated\n", "is not valid Python"),
    ],
)
def test_item_prompt_errors_say_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(IntegrityError, match=r"src/prompts\.py") as caught:
        extract_item_prompt(text)
    assert expected in str(caught.value)
    assert "pins.yaml" in str(caught.value) or "fetch it again" in str(caught.value)


def test_equivalence_messages_may_be_inline_dicts() -> None:
    text = (
        "def llm_equivalence(a, b, llm):\n"
        "    return llm.invoke([\n"
        '        {"role": "system", "content": "Same? YES or NO."},\n'
        '        {"role": "user", "content": f"1: {a}\\n2: {b}"},\n'
        "    ])\n"
    )
    assert extract_equivalence_messages(text) == ("Same? YES or NO.", "1: <first>\n2: <second>")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def other(a, b, llm):\n    pass\n", "no module-level function llm_equivalence()"),
        ("def llm_equivalence(a):\n    pass\n", "takes 1 positional parameter(s)"),
        ("def llm_equivalence(a, b, llm):\n    return a == b\n", "no list of message dicts"),
        (
            "def llm_equivalence(a, b, llm):\n"
            '    messages = [{"role": "user", "content": f"{a} {b}"}]\n',
            "expected one system and one user message",
        ),
        (
            "def llm_equivalence(a, b, llm):\n"
            '    messages = [{"role": "system", "content": "s"},\n'
            '                {"role": "user", "content": f"{a}"}]\n',
            "lacks the placeholder(s) <second>",
        ),
        (
            "def llm_equivalence(a, b, llm):\n"
            '    messages = [{"role": "system", "content": "s"},\n'
            '                {"role": "user", "content": f"{a!r} {b}"}]\n',
            "f-string with a field",
        ),
    ],
)
def test_equivalence_errors_say_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(IntegrityError) as caught:
        extract_equivalence_messages(text)
    assert expected in str(caught.value)


def test_question_slot_is_kept_where_the_prompt_has_one() -> None:
    assert with_question_slot(standin.ITEM_PROMPT) == standin.ITEM_PROMPT


def test_question_slot_is_added_above_the_criterion_where_missing() -> None:
    prompts = extract_judge_prompts(
        standin.prompts_py(question_slot=False), standin.compute_metrics_py()
    )
    assert "<question>" not in prompts.item_prompt
    slotted = with_question_slot(prompts.item_prompt)
    assert "- QUESTION: <question>\n- CHECK: <rubric_item>\n" in slotted
    assert slotted.replace("- QUESTION: <question>\n", "") == prompts.item_prompt


@pytest.mark.parametrize("question_slot", [True, False])
def test_item_messages_fill_question_item_and_response(question_slot: bool) -> None:
    prompts = extract_judge_prompts(
        standin.prompts_py(question_slot=question_slot), standin.compute_metrics_py()
    )
    messages = item_messages(
        prompts, "When did Ana move?", "Says March 2024", "She moved in March 2024."
    )
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    content = messages[0]["content"]
    assert "When did Ana move?" in content
    assert "- CHECK: Says March 2024\n" in content
    assert "- ANSWER: She moved in March 2024.\n" in content
    assert (
        "<question>" not in content
        and "<rubric_item>" not in content
        and "<llm_response>" not in content
    )


def test_filling_is_one_pass_so_values_are_never_substituted_again() -> None:
    filled = fill_placeholders(
        "Q=<question> R=<rubric_item>", {"<question>": "<rubric_item>?", "<rubric_item>": "x"}
    )
    assert filled == "Q=<rubric_item>? R=x"


def test_equivalence_messages_put_the_reference_event_first() -> None:
    prompts = extract_judge_prompts(standin.prompts_py(), standin.compute_metrics_py())
    messages = equivalence_messages(
        prompts, reference_event="Bought a bike", answer_line="Got a bicycle"
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == standin.EQUIVALENCE_SYSTEM
    user = messages[1]["content"]
    assert user.index("Bought a bike") < user.index("Got a bicycle")
    assert user.startswith("Snippet A: Bought a bike \n\n")
