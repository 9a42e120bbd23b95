"""A memory system from outside the project is measured by name once installed beside it.

tests/support/echo_system is a package of its own (one module and its pyproject.toml, with an
entry point in the group `beam_memory.systems`), as a user's system would be. Installed into a
folder of its own (`uv pip install --target`) and put on the path, params `system: echo` picks
it: no file of this project changes. The registry also names what is installed when `system`
is unknown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.params import write_params

pytestmark = pytest.mark.process  # starts processes (a stage, a server, lint-imports, node)

ECHO = REPO_ROOT / "tests" / "support" / "echo_system"

SCRIPT = """
import json
from pathlib import Path

from schemas.records import ChatMessage, ChatSlice, Question, Session
from stages.common import read_params
from systems.registry import installed_systems, load_system

system = load_system(read_params())
chat = ChatSlice(
    conversation_id="7",
    sessions=[
        Session(
            number=1,
            date="January-01-2024",
            date_iso="2024-01-01",
            messages=[ChatMessage(id=1, role="user", content="I moved to Lisbon in May.")],
        )
    ],
)
built = system.build(chat, {}, Path("conv7.jsonl"), Path("."))
question = Question(id="conv7:information_extraction:0", conversation_id="7", index=0,
                    ability="information_extraction", question="Where do I live?")
with system.open_memory("7", Path("conv7.jsonl"), Path(".")) as memory:
    trace = memory.answer(question, None)
print(json.dumps({"installed": installed_systems(), "name": system.name,
                  "counts": dict(built.counts), "answer": trace.answer}))
"""


def install_echo(target: Path) -> None:
    """tests/support/echo_system installed into `target` (`uv pip install --target`)."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (the README's set-up installs it)")
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--no-deps",
            "--python",
            sys.executable,
            "--target",
            str(target),
            str(ECHO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )


def _run(work: Path, path: list[Path]) -> subprocess.CompletedProcess[str]:
    """SCRIPT in `work`, with only `path` on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    command = [sys.executable, "-c", SCRIPT]
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)


def test_an_installed_outside_system_is_picked_by_name(tmp_path: Path) -> None:
    packages = tmp_path / "site"
    install_echo(packages)
    work = tmp_path / "work"
    work.mkdir()
    write_params(work, system="echo")
    done = _run(work, [packages, REPO_ROOT])
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["installed"] == [
        "echo",
        "full_context",
        "graphiti",
        "graphrag",
        "mem0",
        "no_memory",
        "oracle",
        "rag",
        "replay",
    ]
    assert shown["name"] == "echo" and shown["counts"] == {"characters": 25}
    assert shown["answer"] == "I moved to Lisbon in May."
    # without the package on the path, the same params name a system that is not installed
    missing = _run(work, [REPO_ROOT])
    assert missing.returncode != 0
    expected = (
        "system must be one of full_context, graphiti, graphrag, mem0, no_memory, oracle, rag, "
        "replay, found 'echo'"
    )
    assert expected in missing.stderr


def test_an_outside_system_has_settings_of_its_own(tmp_path: Path) -> None:
    """Its section `echo` is validated by the model its entry declares and reaches it; without
    the package installed, nothing claims the section and the params are refused."""
    packages = tmp_path / "site"
    install_echo(packages)
    work = tmp_path / "work"
    work.mkdir()
    write_params(work, system="echo", echo={"repeat": 2})
    done = _run(work, [packages, REPO_ROOT])
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["answer"] == "I moved to Lisbon in May.\nI moved to Lisbon in May."
    write_params(work, system="echo", echo={"repeat": 0})
    bad = _run(work, [packages, REPO_ROOT])
    assert bad.returncode != 0
    assert (
        "params.yaml `echo` (the settings of system 'echo', echo_system.EchoParams)" in bad.stderr
    )
    assert "repeat: Input should be greater than or equal to 1" in bad.stderr
    write_params(work, system="echo", echo={"repeat": 2})
    missing = _run(work, [REPO_ROOT])
    assert missing.returncode != 0
    assert "unknown section(s) echo" in missing.stderr
