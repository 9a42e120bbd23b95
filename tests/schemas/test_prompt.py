"""schemas/prompt.py: a prompt's version is derived from its text, and from nothing else."""

from __future__ import annotations

import hashlib

from schemas.judging import JudgePrompts
from schemas.prompt import Prompt


def test_the_version_is_the_name_and_the_start_of_the_texts_sha256() -> None:
    prompt = Prompt(name="rag-bm25", text="Answer from the excerpts.")
    digest = hashlib.sha256(b"Answer from the excerpts.").hexdigest()
    assert prompt.version == f"rag-bm25-{digest[:12]}"


def test_editing_a_text_changes_its_version_and_the_same_text_keeps_it() -> None:
    prompt = Prompt(name="p", text="Answer briefly.")
    assert Prompt(name="p", text="Answer briefly.").version == prompt.version
    assert Prompt(name="p", text="Answer briefly!").version != prompt.version
    assert Prompt(name="p", text="Answer briefly. ").version != prompt.version


def test_the_judges_version_follows_each_of_its_pinned_texts() -> None:
    texts = {
        "item_prompt": "Judge <rubric_item>",
        "equivalence_system": "s",
        "equivalence_user": "u",
    }
    base = JudgePrompts(**texts)
    assert base.version == JudgePrompts(**texts).version
    assert base.version.startswith("beam-judge-")
    for field in texts:
        edited = JudgePrompts(**{**texts, field: texts[field] + "."})
        assert edited.version != base.version, field
