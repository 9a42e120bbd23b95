"""A system added to the project with a setting of its own takes three files: its module (with
its settings model beside its code), its entry point in pyproject.toml and its section in
params.yaml. In a temporary copy of the repo this test writes those three, re-installs the
project as `uv sync` would (its entry points are the package's metadata), and runs the lite
pipeline with the new system; `dvc exp run -S shout.repeat=3` then re-runs it and the answers
change as the setting says. The scripted test model judges: nothing here measures a memory
system."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.e2e_repo import RepoCopy, git, repo_copy
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.slow]

MODULE = '''"""shout: keeps the chat's last message and answers with it `shout.repeat` times."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from schemas.base import Record
from schemas.estimate import FinishedRun, Origins, RoleEstimate
from schemas.params import EstimateParams
from schemas.records import ChatSlice, Question
from schemas.roles import Role
from schemas.traces import Trace
from systems.port import BuiltMemory, Progress, SystemContext, SystemEntry


class ShoutParams(Record):
    """params `shout`."""

    repeat: int = Field(default=1, ge=1)


@dataclass(frozen=True)
class ShoutMemory:
    text: str
    repeat: int

    def answer(self, question: Question, model: object) -> Trace:
        return Trace(
            question_id=question.id, answer="\\n".join([self.text] * self.repeat),
            tool_calls=[], turn_texts=[], reached_ids=[], reached_message_ids=[], steps=0,
            calls=0, prompt_tokens=0, completion_tokens=0, max_context_tokens=0,
            test_model=False,
        )


@dataclass(frozen=True)
class Shout:
    repeat: int
    name: str = "shout"
    build_roles: tuple[Role, ...] = ()
    memory_noun: str = "last message"

    @property
    def run_files(self) -> Mapping[str, str]:
        return {}

    def record_settings(self) -> Mapping[str, object]:
        return {"repeat": self.repeat}

    def build(self, chat: ChatSlice, models: Mapping[Role, object], out: Path, workdir: Path,
              progress: Progress | None = None) -> BuiltMemory:
        last = chat.sessions[-1].messages[-1].content if chat.sessions else ""
        out.write_text(last, encoding="utf-8")
        return BuiltMemory(chat.conversation_id, {"characters": len(last)})

    @contextmanager
    def open_memory(self, conversation_id: str, memory: Path, workdir: Path
                    ) -> Iterator[ShoutMemory]:
        yield ShoutMemory(memory.read_text(encoding="utf-8"), self.repeat)

    def rates_from_run(self, run: FinishedRun, fallback: EstimateParams
                       ) -> tuple[EstimateParams, Origins]:
        return fallback, {}

    def estimate_build(self, chats: Sequence[ChatSlice]) -> Mapping[Role, RoleEstimate]:
        return {}

    def estimate_answer(self, chats: Sequence[ChatSlice], questions: Sequence[Question],
                        memory_dir: Path | None = None) -> RoleEstimate:
        return RoleEstimate(0, 0, 0)


def build_system(context: SystemContext) -> Shout:
    return Shout(repeat=context.settings_as(ShoutParams).repeat)


ENTRY = SystemEntry(name="shout", build=build_system, settings=ShoutParams)
'''
ENTRY_POINT_AFTER = 'graphiti = "systems.peers.graphiti:ENTRY"\n'


def add_shout(repo: Path) -> None:
    """The three files a developer touches to add the system `shout` with its setting."""
    (repo / "systems" / "shout.py").write_text(MODULE, encoding="utf-8")
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    assert ENTRY_POINT_AFTER in text
    pyproject.write_text(
        text.replace(ENTRY_POINT_AFTER, f'{ENTRY_POINT_AFTER}shout = "systems.shout:ENTRY"\n'),
        encoding="utf-8",
    )
    params = repo / "params.yaml"
    text = params.read_text(encoding="utf-8")
    params.write_text(
        text.replace("\nsystem: graphrag\n", "\nsystem: shout\n") + "shout:\n  repeat: 2\n",
        encoding="utf-8",
    )


def reinstall(repo: RepoCopy, target: Path) -> None:
    """The copy's project installed into `target`, put first on the stages' path: what
    `uv sync` does for a checkout (the entry points are read from the installed metadata)."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (the README's set-up installs it)")
    command = [uv, "pip", "install", "--no-deps", "--python", sys.executable]
    subprocess.run(
        [*command, "--target", str(target), str(repo.path)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    repo.env["PYTHONPATH"] = str(target)


def answers(repo: RepoCopy) -> dict[str, str]:
    lines = (repo.path / "data" / "answer" / "traces.jsonl").read_text(encoding="utf-8")
    traces = [json.loads(line) for line in lines.splitlines() if line]
    return {t["question_id"]: t["answer"] for t in traces}


def test_an_in_tree_system_with_a_setting_takes_three_files_and_runs(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        # the test's own spend guard (its answers are longer than the judge's estimate), apart
        # from what adding the system takes
        repo.update_params({"budget": {"max_over_estimate": 50.0}})
        git(repo.path, "commit", "-qam", "a looser spend guard for this test")
        add_shout(repo.path)
        changed = subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo.path, capture_output=True, text=True
        ).stdout.splitlines()
        assert sorted(line[3:] for line in changed) == [
            "params.yaml",
            "pyproject.toml",
            "systems/shout.py",
        ], changed
        reinstall(repo, tmp_path / "site")

        output = repo.dvc("repro")
        for stage in ("ingest", "answer", "judge", "report"):
            assert f"Running stage '{stage}'" in output, output
        assert repo.read_json("data/answer/run.json")["system"] == "shout"
        twice = answers(repo)
        assert twice and all(len(a.split("\n")) >= 2 for a in twice.values())

        output = repo.dvc("exp", "run", "-S", "shout.repeat=3")
        assert "Running stage 'answer'" in output, output
        thrice = answers(repo)
        assert set(thrice) == set(twice)
        for question, answer in twice.items():
            once = answer[: len(answer) // 2]  # the message, then "\n", then itself
            assert answer == f"{once}\n{once}"
            assert thrice[question] == f"{once}\n{once}\n{once}"
