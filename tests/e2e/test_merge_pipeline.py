"""A split run on two machines, merged: the two-conversation run's record from two
single-conversation runs.

The recipe of README "Beyond one machine", with two clones standing in for two machines: a bare
git repository and a DVC remote (local folders) between them, each clone runs `dvc exp run -S
'slice.conversations=[i]'` and `dvc exp push`es it, a third clone `dvc exp pull`s both, applies
each into a folder of its own and `python -m commands.merge`s them. The merged record, headline,
page, question scores and the judge's files must equal, byte for byte, those of one run of both
conversations in the first copy (no field is left out: no out under data/, reports/ or metrics/
holds a wall time or a run id). rag (BM25, no Neo4j) and the scripted test model keep it fast:
the merge does not depend on the system. The records measure nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.e2e_repo import GIT_IDENTITY, RepoCopy, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]
CONVERSATIONS = ("4", "17")
"""Two of full's five conversations, each a part."""
RUN_FILES = ("data", "metrics", "reports", "params.yaml", "pins.yaml", "dvc.lock")
"""What a part is: the folder of a finished run (commands/merge.py)."""
EQUAL = (
    "reports/memory.md",
    "reports/run.html",
    "metrics/report.json",
    "metrics/run_record.json",
    "metrics/questions.csv",
    "metrics/plots/abilities.csv",
    "metrics/plots/cost.csv",
    "data/judge/questions.jsonl",
    "data/judge/judgements.jsonl",
    "data/judge/summary.json",
    "data/answer/traces.jsonl",
    "data/answer/summary.json",
    "data/slice/questions.jsonl",
)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def clone(origin: Path, into: Path, like: RepoCopy) -> RepoCopy:
    """A clone of `origin` (another machine), run with `like`'s environment."""
    git(origin.parent, "clone", "-q", "-b", "main", str(origin), str(into))
    for key, value in GIT_IDENTITY.items():
        git(into, "config", "--local", key, value)
    return RepoCopy(into, like.env, like.hub, like.scorer, like.record)


def question_ids(run: Path) -> list[str]:
    rows = (run / "data/judge/questions.jsonl").read_text().splitlines()
    return [json.loads(row)["question_id"] for row in rows if row]


def keep_run(repo: RepoCopy, into: Path) -> Path:
    """The run in `repo`'s workspace copied to `into`: a part for the merge."""
    into.mkdir(parents=True)
    for name in RUN_FILES:
        source = repo.path / name
        if source.is_dir():
            shutil.copytree(source, into / name)
        elif source.exists():
            shutil.copy2(source, into / name)
    return into


def test_split_run_on_two_clones_merges_into_the_two_conversation_run(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror, mode="full") as repo:
        repo.update_params({"system": "rag"})
        origin = tmp_path / "origin.git"
        git(tmp_path, "init", "-q", "--bare", str(origin))
        repo.dvc("remote", "add", "-d", "store", str(tmp_path / "dvc-store"))
        git(repo.path, "add", "-A")
        git(repo.path, "commit", "-q", "-m", "rag, full, with a DVC remote")
        git(repo.path, "push", "-q", str(origin), "HEAD:refs/heads/main")

        # one machine: both conversations in one run
        repo.update_params({"slice": {"conversations": list(CONVERSATIONS)}})
        repo.dvc("repro")

        # two machines: one conversation each, pushed
        for conv in CONVERSATIONS:
            machine = clone(origin, tmp_path / f"machine{conv}", repo)
            machine.dvc("exp", "run", "-n", f"part{conv}", "-S", f"slice.conversations=[{conv}]")
            machine.dvc("exp", "push", "origin", f"part{conv}")

        # the merger: pull both, each applied into a folder of its own, merged
        merger = clone(origin, tmp_path / "merger", repo)
        parts = []
        for conv in CONVERSATIONS:
            merger.dvc("exp", "pull", "origin", f"part{conv}")
            merger.dvc("exp", "apply", f"part{conv}")
            parts.append(str(keep_run(merger, tmp_path / "parts" / f"part{conv}")))
        merger.python("-m", "commands.merge", *parts)

        differ = [
            rel
            for rel in EQUAL
            if (merger.path / rel).read_bytes() != (repo.path / rel).read_bytes()
        ]
        assert differ == []
        # a part of another configuration is refused, naming the difference, and nothing changes
        odd = tmp_path / "parts" / "odd"
        shutil.copytree(parts[1], odd)
        params = (odd / "params.yaml").read_text()
        assert "max_equivalence_calls: 200" in params
        (odd / "params.yaml").write_text(params.replace("calls: 200", "calls: 100"))
        record = (merger.path / "reports/memory.md").read_bytes()
        refused = merger.run("-m", "commands.merge", parts[0], str(odd), timeout=600)
        assert refused.returncode != 0
        assert "judge.max_equivalence_calls" in refused.stderr
        assert (merger.path / "reports/memory.md").read_bytes() == record

        # the merged run holds both parts' questions (not one part's left in place)
        merged = question_ids(merger.path)
        assert len(merged) == sum(len(question_ids(Path(p))) for p in parts)
        assert {q.split(":")[0] for q in merged} == {f"conv{c}" for c in CONVERSATIONS}
