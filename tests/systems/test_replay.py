"""replay: small files in past.dev's and agent-memory-benchmark's layouts, each question answered
from its own published context (read back from the test model's requests), no build call, a file
refused unless it hashes to its pin, and every id counted (unmatched, duplicated, missing)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from schemas.errors import DataError, IntegrityError, ParamsError
from schemas.params import PublishedPin
from stages.common import read_params
from systems.port import memory_file
from systems.prompts import REPLAY
from systems.registry import load_system
from systems.replay import Replay, parse_contexts
from tests.conftest import REPO_ROOT
from tests.support.crafted_chat import crafted_chat, question
from tests.support.models import Recording, scripted_client

RATES = read_params(REPO_ROOT / "params.yaml").estimate.agent


def pastdev_file(rows: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def amb_file(results: list[dict[str, object]]) -> bytes:
    summary = {"dataset": "beam", "split": "100k", "answer_llm": "x", "results": results}
    return gzip.compress(json.dumps(summary).encode(), mtime=0)


PASTDEV_ROWS = [
    {
        "questionId": "9_information_extraction_0",
        "conversationId": "9",
        "recall": {"results": [{"rank": 1, "content": "Dana moved to Lisbon in May."}]},
        "answer": "theirs",
    },
    {"questionId": "9_temporal_reasoning_1", "conversationId": "9", "error": "x", "score": 0},
    {"questionId": "10_abstention_0", "recall": {"results": []}},
    {"questionId": "not-an-id", "recall": {"results": []}},
    {"questionId": "9_information_extraction_0", "recall": {"results": []}},
]


def pin(layout: str, data: bytes | None) -> PublishedPin:
    return PublishedPin(
        layout=layout,  # type: ignore[arg-type]
        repo="owner/name",
        commit="0" * 40,
        path="results.jsonl",
        sha256=None if data is None else hashlib.sha256(data).hexdigest(),
        licence="MIT",
        system="Their system",
        models="their retriever",
    )


def replay(tmp_path: Path, layout: str, data: bytes, pinned: bytes | None) -> Replay:
    file = tmp_path / "published"
    file.write_bytes(data)
    return Replay(source="theirs", pin=pin(layout, pinned), file=file, agent_rates=RATES)


def test_pastdev_layout_each_question_answered_from_its_own_recall(tmp_path: Path) -> None:
    data = pastdev_file(PASTDEV_ROWS)
    system = replay(tmp_path, "pastdev_results", data, data)
    found = system.contexts()
    assert sorted(found.by_question) == ["conv10:abstention:0", "conv9:information_extraction:0"]
    assert found.unmatched == ["not-an-id"] and found.duplicates == [
        "conv9:information_extraction:0"
    ]
    recall = PASTDEV_ROWS[0]["recall"]
    assert found.by_question["conv9:information_extraction:0"].context == json.dumps(
        recall, ensure_ascii=False, separators=(",", ":")
    )

    chat = crafted_chat()
    out = memory_file(tmp_path, chat.conversation_id)
    model = Recording(scripted_client("agent", tmp_path))
    built = system.build(chat, {}, out, tmp_path)
    assert built.counts == {"contexts": 1} and built.model_calls == 0
    assert built.notes == {"published_unmatched_ids": 1, "published_duplicate_ids": 1}
    asked = question("Where did Dana move?")
    missing = question("How long between the moves?", "temporal_reasoning", 1)
    with system.open_memory(chat.conversation_id, out, tmp_path) as memory:
        trace = memory.answer(asked, model)
        absent = memory.answer(missing, model)
    assert [r.prompt_version for r in model.requests] == [REPLAY.version]
    prompt = model.requests[0].messages[-1].content or ""
    assert "Dana moved to Lisbon in May." in prompt and prompt.endswith("Where did Dana move?")
    assert trace.error is None and trace.calls == 1 and "Lisbon" in trace.answer
    assert absent.calls == 0 and absent.error is not None
    assert "no published context for conv9:temporal_reasoning:1" in absent.error
    estimate = system.estimate_answer([chat], [asked, missing])
    assert estimate.calls == 1


def test_amb_layout_gzipped_or_not(tmp_path: Path) -> None:
    results = [
        {"query_id": "9_information_extraction_0", "query": "q", "context": "Dana: Lisbon"},
        {"query_id": "9_abstention_1", "query": "q", "context": None},
    ]
    for data in (amb_file(results), json.dumps({"results": results}).encode()):
        found = parse_contexts("amb_results", data)
        assert list(found.by_question) == ["conv9:information_extraction:0"]
        assert found.by_question["conv9:information_extraction:0"].context == "Dana: Lisbon"
    with pytest.raises(DataError, match="no `results` list"):
        parse_contexts("amb_results", b"{}")


def test_a_file_off_its_pin_or_without_one_is_refused_before_any_call(tmp_path: Path) -> None:
    data = pastdev_file(PASTDEV_ROWS)
    with pytest.raises(IntegrityError, match="different or damaged"):
        replay(tmp_path, "pastdev_results", data, b"other").contexts()
    with pytest.raises(IntegrityError, match=r"sha256sum .*published") as caught:
        replay(tmp_path, "pastdev_results", data, None).build(
            crafted_chat(), {}, tmp_path / "m.jsonl", tmp_path
        )
    assert "published.theirs.sha256" in str(caught.value)
    assert not (tmp_path / "m.jsonl").exists()


def test_the_record_says_what_was_measured_never_the_system_run(tmp_path: Path) -> None:
    shown = replay(tmp_path, "amb_results", b"", None).record_settings()
    assert shown["measured"] == (
        "reader and judge on Their system's published retrieval, produced with their "
        "retriever; Their system itself was not run"
    )


def test_params_name_a_pinned_context_source_and_its_file(tmp_path: Path) -> None:
    params = read_params(REPO_ROOT / "params.yaml")
    for replay_params, message in [
        ({"source": None, "file": "f"}, "replay.source"),
        ({"source": "jelly-answers", "file": "f"}, "pastdev-100k, hindsight-100k"),
        ({"source": "hindsight-100k", "file": None}, "only a local copy can be read"),
    ]:
        changed = params.model_copy(
            update={"system": "replay", "replay": params.replay.model_validate(replay_params)}
        )
        with pytest.raises(ParamsError, match=message):
            load_system(changed)
