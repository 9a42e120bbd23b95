"""A temporary copy of the repository wired to loopback servers, for end-to-end DVC runs.

The copy gets the working-tree version of every file git tracks or would track and a fresh git
repository; params are overridden to the loopback Hub mirror's size and sha256, the scorer
stand-in served from loopback, and the deterministic test model `scripted/rules`. Nothing of it
is ever a record of the benchmark: it lives and dies in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clients.local_model.cache import cache_root as local_cache_root
from stages.common import PINS_FILE, SETTINGS_FILE, params_mapping
from tests.conftest import REPO_ROOT, SHARED_BEAM
from tests.support.hub_mirror import HubMirror
from tests.support.models import scripted_models
from tests.support.protocol_standin import standin_protocol_pins, standin_raw_files
from tests.support.scorer_standin import (
    COMMIT,
    REPO,
    RawHost,
    raw_layout,
    serve_files,
    standin_files,
    standin_judge_pins,
)

COMMAND_TIMEOUT_SECONDS = 900
SCRIPTED_RATES = {
    # What the scripted test model produces, for the estimator (params `estimate`), measured by
    # scripts/calibrate_scripted_rates.py on its runs of 2026-12-02 (the judge's rates by hand).
    # Full set (757 chunks; 832 entity mentions, 1,667 statements of which 1,532 updatable; 124
    # entity pairs and 2,689 statement pairs sent; 2 agent calls per question, tool results of
    # 13.15 rows at 80 tokens; judge 432 calls): the per-chunk rates, label spreads
    # (1 / Σ share²), token sizes, and the two pair rates fitted so the estimator gives those
    # pair counts. Lite set (the only run whose searches are not capped: 5 rows of a 19-item
    # graph): result_match_share. The pipeline benchmark compares estimate and actual on fresh
    # lite and full runs.
    "ingest": {
        "entities_per_chunk": 1.1,
        "statements_per_chunk": 2.2,
        "updatable_share": 0.92,
        "entity_labels_in_use": 1.92,
        "statement_labels_in_use": 1.79,
        "entity_lookalike_rate": 0.00346,
        "statement_overlap_rate": 0.0269,
        "extraction_completion_tokens": 233,
        "tokens_per_entity_pair": 19,
        "tokens_per_statement_pair": 88,
        "completion_tokens_per_pair": 12.3,
    },
    "agent": {
        "calls_per_question": 2,
        "result_rows_per_step": 13.15,
        "result_match_share": 0.26,
        "tokens_per_result_row": 80,
        "completion_tokens_per_call": 63.5,
    },
    "mem0": {
        # Full set, 2026-12-06: Mem0 kept 1,051 memories from 627 adds; the scripted rule's facts
        # (two sentences of each user message) are 35.3 tokens and its replies 80.6 on average.
        "memories_per_add": 1.68,
        "tokens_per_memory": 35.3,
        "completion_tokens_per_add": 80.6,
    },
    "judge": {
        "answer_tokens": 100,
        "item_prompt_tokens": 104,
        "equivalence_prompt_tokens": 43,
        "completion_tokens_per_call": 13.2,
        "event_calls_per_item": 3.6,
    },
}
STALE = ("dvc.lock", "metrics", "reports")


def copy_repo(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = REPO_ROOT / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    for stale in STALE:  # a test copy starts with no record of any run
        path = target / stale
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


GIT_IDENTITY = {"user.name": "beam test", "user.email": "test@example.invalid"}
"""The committer of every test copy, set in the copy's own .git/config: a fresh machine has no
global git identity, and git and DVC (`dvc exp run`, `dvc exp apply`) refuse to commit without
one."""


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=60)


def init_git(repo: Path) -> None:
    """A fresh git repository in `repo` that commits as GIT_IDENTITY, whatever HOME holds."""
    git(repo, "init", "-q")
    for key, value in GIT_IDENTITY.items():
        git(repo, "config", "--local", key, value)


def empty_folder(tmp_path: Path, name: str) -> Path:
    """`tmp_path/name`, made: a copy's HOME (empty, as on a fresh machine: no ~/.gitconfig, no
    caches) or its TMPDIR."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    return folder


def split_params(
    merged: dict[str, Any], layers: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`merged` cut back into params.yaml and the layer files (pins.yaml, settings.yaml): a key
    goes to the layer whose present copy holds it, section by section down to the leaves (a
    layer holding `models.agent.api_base` takes that key, params.yaml `models.agent.model`),
    else to params.yaml."""
    files: dict[str, dict[str, Any]] = {"params.yaml": {}, **{name: {} for name in layers}}

    def place(path: tuple[str, ...], value: Any, held: dict[str, Any]) -> None:
        # held: per layer, its copy at `path[:-1]` (a layer not holding that section: absent)
        below = {f: h[path[-1]] for f, h in held.items() if path[-1] in h}
        sections = {f: h for f, h in below.items() if isinstance(h, dict)}
        if isinstance(value, dict) and value and sections:
            for key, item in value.items():
                place((*path, key), item, sections)
            return
        owner = next(iter(below), "params.yaml")
        target = files[owner]
        for name in path[:-1]:
            target = target.setdefault(name, {})
        target[path[-1]] = value

    for name, value in merged.items():
        place((name,), value, layers)
    return files


def write_split(repo: Path, merged: dict[str, Any]) -> None:
    """`merged` as the copy's params.yaml, pins.yaml and settings.yaml (`split_params`), each
    file written only when its values change (DVC hashes pins.yaml and settings.yaml as deps),
    its sections in the order the file had (`dvc exp show` orders its columns by the file)."""
    layers = {
        name: yaml.safe_load((repo / name).read_text()) or {}
        for name in (PINS_FILE, SETTINGS_FILE)
        if (repo / name).is_file()
    }
    for name, data in split_params(merged, layers).items():
        path = repo / name
        if not path.is_file() and not data:
            continue
        before = yaml.safe_load(path.read_text()) if path.is_file() else None
        if before != data:
            order = list(before or {})
            data = dict(sorted(data.items(), key=lambda kv: _rank(order, kv[0])))
            path.write_text(yaml.safe_dump(data, sort_keys=False))


def _rank(order: list[str], key: str) -> int:
    """Where `key` stood in a file's sections (a new one: after them all)."""
    return order.index(key) if key in order else len(order)


def mirror_release(release: dict[str, Any], tier: str) -> dict[str, Any]:
    """A tier's release pins with the mirror's size and sha256 in place of the release's."""
    manifest = json.loads((SHARED_BEAM / "MANIFEST.json").read_text())
    files = []
    for file in release["files"]:
        rel = f"mirror/datasets/{release['repo_id']}/{file['filename']}"
        if not (SHARED_BEAM / rel).is_file():
            raise FileNotFoundError(f"the mirror has no {rel} for tier {tier}")
        size = (SHARED_BEAM / rel).stat().st_size
        files.append(file | {"size_bytes": size, "sha256": manifest["sha256"][rel]})
    return release | {"files": files}


def params_for_tests(
    params: dict[str, Any], scorer_base_url: str, mode: str, tier: str = "100K"
) -> dict[str, Any]:
    """The params of a test copy: mirror pins, stand-in scorer, the scripted test model."""
    params = json.loads(json.dumps(params))
    params["mode"] = mode
    params["tier"] = tier
    params["release"][tier] = mirror_release(params["release"][tier], tier)
    params["judge"] |= standin_judge_pins() | {"base_url": scorer_base_url}
    params["judge"]["protocol_sources"] = standin_protocol_pins()
    params["models"] = scripted_models()
    params["estimate"] = json.loads(json.dumps(SCRIPTED_RATES))
    return params


@dataclass
class RepoCopy:
    path: Path
    env: dict[str, str]
    hub: HubMirror
    scorer: RawHost
    record: Path
    """The scripted model's request log (BEAM_SCRIPTED_RECORD): one JSON line per model call."""

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """`python <args>` in the copy, with its environment."""
        return subprocess.run(
            [sys.executable, *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, *args: str, timeout: float = COMMAND_TIMEOUT_SECONDS) -> str:
        """`python <args>` in the copy, which must succeed: what it printed."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def dvc(self, *args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT_SECONDS) -> str:
        done = self.run("-m", "dvc", *args, timeout=timeout)
        output = done.stdout + done.stderr
        if check:
            assert done.returncode == 0, output
        return output

    def git_global(self, key: str) -> str | None:
        """`git config --global <key>` in the copy's environment: None where unset."""
        done = subprocess.run(
            ["git", "config", "--global", key],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    def model_calls(self) -> list[dict[str, Any]]:
        if not self.record.is_file():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def read_json(self, rel: str) -> Any:
        return json.loads((self.path / rel).read_text())

    def update_params(self, sections: dict[str, Any]) -> None:
        """Merge into the copy's params: each section's keys replace the copy's, the rest stays;
        a key pins.yaml or settings.yaml holds is changed there (as `dvc exp run -S
        settings.yaml:...`), any other in params.yaml. A file whose values do not change is
        left as it is."""
        merged = params_mapping(self.path / "params.yaml")
        for name, value in sections.items():
            if isinstance(value, dict) and isinstance(merged.get(name), dict):
                merged[name] = {**merged[name], **value}
            else:
                merged[name] = value
        write_split(self.path, merged)

    def set_in_params_yaml(self, key: str, value: Any) -> None:
        """Write a dotted key into the copy's params.yaml, as `dvc exp run -S key=value` does: a
        key there wins over settings.yaml and is tracked by the stages that list its section."""
        path = self.path / "params.yaml"
        params = yaml.safe_load(path.read_text()) or {}
        *sections, name = key.split(".")
        node = params
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
        path.write_text(yaml.safe_dump(params, sort_keys=False))

    def use_checkout_jars(self) -> None:
        """The copy finds the Neo4j jars where `make neo4j` puts them (its own .cache/neo4j/lib,
        here a link to this checkout's), not through BEAM_NEO4J_LIB: as a user's clone does."""
        self.env.pop("BEAM_NEO4J_LIB", None)
        lib = self.path / ".cache" / "neo4j" / "lib"
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.symlink_to(REPO_ROOT / ".cache" / "neo4j" / "lib", target_is_directory=True)

    def stage(
        self, name: str, timeout: float = COMMAND_TIMEOUT_SECONDS
    ) -> subprocess.CompletedProcess[str]:
        """`python -m stages.<name>` in the copy, as `dvc repro` would run it (not checked)."""
        return subprocess.run(
            [sys.executable, "-m", f"stages.{name.replace('-', '_')}"],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@contextmanager
def repo_copy(
    tmp_path: Path, hub: HubMirror, mode: str = "lite", tier: str = "100K"
) -> Iterator[RepoCopy]:
    files = raw_layout(REPO, COMMIT, standin_files()) | standin_raw_files()
    with serve_files(files) as scorer:
        repo = tmp_path / "repo"
        copy_repo(repo)
        mapping = params_mapping(repo / "params.yaml")
        params = params_for_tests(mapping, scorer.base_url, mode, tier)
        write_split(repo, params)
        init_git(repo)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "copy for an end-to-end test")
        record = tmp_path / "model-calls.jsonl"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("HF_", "DVC_", "PYTHONPATH", "GIT_", "XDG_"))
        }
        env |= {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "HF_ENDPOINT": hub.endpoint,
            "HF_HOME": str(tmp_path / "hf"),
            "HOME": str(empty_folder(tmp_path, "home")),
            # the stages' work folders (Neo4j homes among them) under this copy's own folder,
            # apart from any other test's run beside it (pytest-xdist workers)
            "TMPDIR": str(empty_folder(tmp_path, "tmp")),
            "BEAM_LOCAL_CACHE": str(local_cache_root()),
            "DVC_NO_ANALYTICS": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "BEAM_NEO4J_LIB": str(REPO_ROOT / ".cache" / "neo4j" / "lib"),
            "BEAM_SCRIPTED_RECORD": str(record),
        }
        yield RepoCopy(repo, env, hub, scorer, record)
