"""System replay through the whole lite pipeline, in a temporary copy of the repo with the scripted
test model: a small file in past.dev's layout (a context for each of the two lite questions, one
for a question of no run, one under an id of no layout), pinned by its sha256; the build makes no
model call, each answer prompt holds its own question's published context (read back from the
test model's request log), the build's notes count the unmatched id, and the record says what was
measured. Before the pin, the same file is refused with the command that prints its hash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from systems.prompts import REPLAY
from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]

CONTEXTS = {
    "17_information_extraction_0": "replayed context one: the published recall for IE 0",
    "17_multi_session_reasoning_0": "replayed context two: the published recall for MSR 0",
    "99_abstention_0": "an id of no question of this run: never asked",
    "not-an-id": "an id in no layout of ours: counted as unmatched",
}


def test_replay_answers_each_lite_question_from_its_published_context(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    published = tmp_path / "results.jsonl"
    published.write_text(
        "".join(
            json.dumps({"questionId": qid, "recall": {"results": [{"content": text}]}}) + "\n"
            for qid, text in CONTEXTS.items()
        )
    )
    digest = hashlib.sha256(published.read_bytes()).hexdigest()
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.update_params({"system": "replay"})
        repo.set_in_params_yaml("replay.source", "pastdev-100k")
        repo.set_in_params_yaml("replay.file", str(published))
        refused = repo.dvc("repro", "ingest", check=False)
        assert f"sha256sum {published}" in refused
        assert "published.pastdev-100k.sha256" in refused

        pins = yaml.safe_load((repo.path / "pins.yaml").read_text())["published"]
        pins["pastdev-100k"]["sha256"] = digest
        repo.update_params({"published": pins})
        repo.dvc("repro")
        calls = repo.model_calls()
        ingest = repo.read_json("data/ingest/run.json")
        record = (repo.path / "reports" / "memory.md").read_text()

    assert [c for c in calls if c["task"] not in ("answer", "judge", "equivalence")] == []
    prompts = [c["messages"][-1]["content"] for c in calls if c["prompt_version"] == REPLAY.version]
    assert len(prompts) == 2
    for text in list(CONTEXTS.values())[:2]:
        assert sum(text in p for p in prompts) == 1
    assert not any(text in p for text in list(CONTEXTS.values())[2:] for p in prompts)
    assert ingest["published_unmatched_ids"] == {"conv17": 1}
    assert (
        "reader and judge on past.dev's published retrieval, produced with past.dev's recall "
        "(limit 100, 8000 tokens); past.dev itself was not run"
    ) in record
