"""scripts/pin_tier_questions.py, which pinned the 1M and 10M question sets from the benchmark's
question files: on the 500K chats of ../shared/beam it reads the same question ids the slice
builds from the release, in the fixture's order, and its lite is the pinned 500K lite's shape."""

from __future__ import annotations

import importlib.util

import pytest

from stages.common import load_fixture
from tests.conftest import REPO_ROOT, SHARED_BEAM, skip_or_fail

pytestmark = pytest.mark.beam

_SPEC = importlib.util.spec_from_file_location(
    "pin_tier_questions", REPO_ROOT / "scripts" / "pin_tier_questions.py"
)
assert _SPEC is not None and _SPEC.loader is not None
script = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(script)


def test_the_question_files_give_the_ids_the_release_gives() -> None:
    chats = SHARED_BEAM / "500K"
    if not chats.is_dir():
        skip_or_fail(f"the 500K chats are not in {chats}")
    pinned = load_fixture(REPO_ROOT / "fixtures" / "slices-500K.json")

    ids = script.question_ids(chats)
    made = script.fixture("500K", ids, "13", "0" * 40, {})

    assert made.modes["all"].question_ids == pinned.modes["all"].question_ids
    assert made.modes["all"].conversations == pinned.modes["all"].conversations
    assert made.modes["lite"].question_ids == pinned.modes["lite"].question_ids
    assert made.official_cut.last_message_ids is None  # a cut is never made up
