"""The merge cores (bench/merge.py): what refuses parts, and how per-part files combine. The
whole merge against a real two-conversation run is tests/e2e/test_merge_pipeline.py."""

from __future__ import annotations

import pytest

from bench.merge import (
    check_disjoint,
    check_same,
    differences,
    in_order,
    merge_leak_checks,
    merge_memory_sizes,
    merge_slice_sizes,
    merge_source,
    merge_usage,
    without_split,
)
from schemas.errors import DataError
from schemas.leak_check import LeakCheck, LeakFinding
from schemas.records import RepairedMessage, SliceSource
from schemas.runs import MemorySizes


def test_the_split_param_is_the_only_one_left_out() -> None:
    params = {"mode": "full", "slice": {"conversations": ["4"], "cut": "full"}}
    assert without_split(params) == {"mode": "full", "slice": {"cut": "full"}}
    assert params["slice"] == {"conversations": ["4"], "cut": "full"}  # not changed in place


def test_differences_name_the_dotted_keys() -> None:
    a = {"judge": {"max_equivalence_calls": 200}, "mode": "full", "system": "rag"}
    b = {"judge": {"max_equivalence_calls": 100}, "mode": "full", "tier": "100K"}
    assert differences(a, b) == ["judge.max_equivalence_calls", "system", "tier"]
    assert differences(a, dict(a)) == []


def test_parts_of_another_configuration_are_refused_naming_the_key() -> None:
    same = {"models": {"agent": {"model": "m"}}}
    check_same("params", {"a": same, "b": dict(same)})
    with pytest.raises(DataError, match=r"params: a and c differ at models\.agent\.model"):
        check_same("params", {"a": same, "b": same, "c": {"models": {"agent": {"model": "n"}}}})


def test_parts_sharing_a_conversation_are_refused() -> None:
    check_disjoint({"a": ["4"], "b": ["17", "1"]})
    with pytest.raises(DataError, match="conversation 4 is in part a and in part b"):
        check_disjoint({"a": ["4"], "b": ["17", "4"]})
    with pytest.raises(DataError, match="part b holds no conversation"):
        check_disjoint({"a": ["4"], "b": []})


def test_records_take_the_modes_order_not_the_parts() -> None:
    order = ["conv1:a:0", "conv4:a:0", "conv6:a:0", "conv1:b:0", "conv4:b:0"]
    # parts {1, 6} and {4}, concatenated: not the mode's order
    merged = ["conv1:a:0", "conv6:a:0", "conv1:b:0", "conv4:a:0", "conv4:b:0"]
    assert in_order(merged, str, order) == [
        "conv1:a:0",
        "conv4:a:0",
        "conv6:a:0",
        "conv1:b:0",
        "conv4:b:0",
    ]
    with pytest.raises(DataError, match="conv9:a:0: not among the mode's questions"):
        in_order(["conv9:a:0"], str, order)


def test_sizes_keep_each_conversation_and_sum_the_totals() -> None:
    four = {
        "conv4": {"messages": 2, "questions": 1},
        "questions": {"abstention": 1},
        "total": {"conversations": 1, "messages": 2, "questions": 1},
    }
    seventeen = {
        "conv17": {"messages": 3, "questions": 2},
        "questions": {"abstention": 1, "summarization": 1},
        "total": {"conversations": 1, "messages": 3, "questions": 2},
    }
    assert merge_slice_sizes([four, seventeen]) == {
        "conv4": {"messages": 2, "questions": 1},
        "conv17": {"messages": 3, "questions": 2},
        "questions": {"abstention": 2, "summarization": 1},
        "total": {"conversations": 2, "messages": 5, "questions": 3},
    }
    memories = merge_memory_sizes(
        [MemorySizes.of([("4", {"chunks": 2})]), MemorySizes.of([("17", {"chunks": 5})])]
    )
    assert memories.to_json() == {
        "total": {"chunks": 7},
        "conv4": {"chunks": 2},
        "conv17": {"chunks": 5},
    }


def test_usage_is_summed_per_role() -> None:
    a = {"agent": {"calls": 2, "prompt_tokens": 10}}
    b = {"agent": {"calls": 3, "prompt_tokens": 5}, "embedding": {"calls": 1}}
    assert merge_usage([a, b]) == {
        "agent": {"calls": 5, "prompt_tokens": 15},
        "embedding": {"calls": 1},
    }


def test_source_repairs_in_conversation_order_and_one_cut() -> None:
    def repaired(conv: str) -> RepairedMessage:
        return RepairedMessage(conversation_id=conv, message_id=1, why="cut")

    a = SliceSource(cut="full", left_out={}, repaired=[repaired("17")])
    b = SliceSource(cut="full", left_out={}, repaired=[repaired("4")])
    merged = merge_source([a, b], ["4", "17"])
    assert [r.conversation_id for r in merged.repaired] == ["4", "17"]
    with pytest.raises(DataError, match="cut differently"):
        merge_source([a, b.model_copy(update={"cut": "official"})], ["4", "17"])


def test_leak_checks_sum_their_counts() -> None:
    finding = LeakFinding(question_id="conv4:a:0", kind="rubric_item", text="x", part="user")
    a = LeakCheck(questions=2, prompts=3, gold_texts=4, findings=[])
    b = LeakCheck(questions=1, prompts=1, gold_texts=2, findings=[finding])
    assert merge_leak_checks([a, b]) == LeakCheck(
        questions=3, prompts=4, gold_texts=6, findings=[finding]
    )
