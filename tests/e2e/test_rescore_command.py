"""The rescore command end to end on Jelly's real published files, in a temporary copy of the repo
with the scripted test model and the stand-in scorer (mode lite: slice, fetch, then
`python -m commands.rescore`): no answer call, one judge call per rubric item of the two matched
questions, each holding Jelly's own answer (read back from the test model's request log), the
other 398 counted as outside the slice, and the record's label and warning say what was measured.
A file with a wrong hash is refused before any call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.e2e_repo import repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]

JELLY = Path(__file__).resolve().parents[3] / "shared/published/jelly/results/beam-100k/jelly-v1"


def test_rescore_judges_jellys_answers_and_counts_every_question(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    if not (JELLY / "answers.jsonl").is_file():
        pytest.skip(f"Jelly's published files are not staged at {JELLY}")
    answers = {
        row["id"]: row["answer"]
        for row in map(json.loads, (JELLY / "answers.jsonl").read_text().splitlines())
    }
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.dvc("repro", "slice")
        repo.dvc("repro", "fetch")
        damaged = tmp_path / "answers.jsonl"
        damaged.write_bytes((JELLY / "answers.jsonl").read_bytes() + b"\n")
        refused = repo.run(
            "-m", "commands.rescore", "--answers", str(damaged),
            "--verdicts", str(JELLY / "verdicts.jsonl"), timeout=300,
        )  # fmt: skip
        assert refused.returncode == 2 and "published.jelly-answers.sha256" in refused.stderr
        assert repo.model_calls() == []

        out = tmp_path / "rescore"
        repo.python(
            "-m", "commands.rescore", "--answers", str(JELLY / "answers.jsonl"),
            "--verdicts", str(JELLY / "verdicts.jsonl"), "--out", str(out),
        )  # fmt: skip
        record = json.loads((out / "record.json").read_text())
        rubrics = [json.loads(line) for line in (repo.path / "data/slice/rubrics.jsonl").open()]

    items = sum(len(r["rubric"]) for r in rubrics)
    assert record["matching"] == {
        "matched": 2,
        "missing": [],
        "outside_slice": 398,
        "unmatched": [],
        "duplicates": [],
    }
    assert record["answer_calls"] == 0
    assert record["judge_calls"] == items > 0 and record["failed_judge_calls"] == 0
    assert record["test_model"] is True
    assert record["measured"].startswith("Jelly v1's published answers (written by gpt-5.6-luna")
    assert "Jelly v1 itself was not run" in record["measured"]
    page = (out / "rescore.md").read_text()
    assert "measure nothing" in page and "2 questions matched" in page
    overall = record["agreement"]["overall"]
    assert overall["items"] + overall["not_compared_items"] == items
    # every judge prompt holds Jelly's own answer to the question it judges
    prompts = [call["messages"][-1]["content"] for call in repo.model_calls()]
    assert len(prompts) == items
    for rubric in rubrics:
        number, ability, index = rubric["question_id"].removeprefix("conv").split(":")
        answer = answers[f"100K/{number}/{ability}/{index}"]
        assert sum(answer in p for p in prompts) == len(rubric["rubric"])
