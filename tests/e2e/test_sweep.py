"""A sweep that DVC runs: six experiments from one queue, two at a time, then the comparison.

In a lite copy of the repo whose every role talks to the scripted test model served over HTTP
(tests/support/scripted_server.py), so that calls are counted at the model server: the baseline
runs its data stages and the judge check (`dvc repro judge-check`, committed, as a user's
checkout has run `dvc repro`), then `dvc exp run --queue -S <param>=a,b,c,d` and
`dvc queue start -j 2`. Each queued experiment runs in its own copy under `.dvc/tmp/exps/`; the
checkout's Neo4j jars (no BEAM_NEO4J_LIB), call cache and spend ledger serve them all
(clients/shared_root.py). Then `python -m commands.compare` has one column per experiment, the
ledger is one file that counted every call the server saw, and a second sweep of one value
(rag: its embeddings are called in both stages), whose stages run again in a fresh copy, makes
no model call.

The swept param is `system` (graphrag, rag, full_context, no_memory and the peers mem0 and
graphiti; the embedder is the server's test embedder, and the extraction role asks for JSON by
schema, as Graphiti's calls need) where params.yaml has it, else `answer.max_steps`.

Then the equal-constraints queue (params.yaml with `system` and `answer.regime`): graphrag in
the one_shot regime, mem0 in the agent regime, and a `mem0.top_k` sweep on mem0's built memory.
The server sees no build call in that queue (every memory is the one already built: its calls
come from the call cache), only answer, judge and query-embedding calls; compare labels each run's
regime, pairs graphrag's own agent with mem0's agent regime but not mem0's own one-shot answer with
its agent regime, and the answer model's context grows with top_k.

Last, each baseline's experiment is applied to the workspace (`dvc exp apply`) and read as its
own run: built without a model, one `answer` call per question, the same judge, its record,
run.json files and page naming the system and the headline keeping its layout (the system is a
param column, not a metric). rag reaches chunks of the lite chat; full_context runs with a window
smaller than the lite chat (about 1.3k tokens), so its policy cuts the oldest messages and records
the tokens left out; no_memory is the floor: the test model says it does not know, and the judge
scores 0.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_pipeline import LITE_ASKED, assert_metrics_layout
from tests.support.e2e_repo import RepoCopy, git, repo_copy
from tests.support.estimates import usage_of
from tests.support.hub_mirror import HubMirror, hub_mirror_fixture  # noqa: F401
from tests.support.scripted_server import ServerProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.beam,
    pytest.mark.neo4j,
    pytest.mark.slow,
    pytest.mark.timeout(1500),
]

MODEL = "openai/test-model"
QUEUE_TIMEOUT_SECONDS = 600
"""Per sweep; the test's own timeout holds the set-up run and both sweeps on a busy 2-core CI
machine, where the local model's build may still be running beside it (tests/conftest.py)."""
POLL_SECONDS = 2.0
LITE_MESSAGES = {18, 156, 157}
BASELINES = ("rag", "full_context", "no_memory")


def swept_param(repo: RepoCopy) -> tuple[str, tuple[str, ...]]:
    params = yaml.safe_load((repo.path / "params.yaml").read_text())
    if "system" in params:
        return "system", ("graphrag", "rag", "full_context", "no_memory", "mem0", "graphiti")
    return "answer.max_steps", ("1", "2", "3", "4", "5", "6")


def queue_states(repo: RepoCopy) -> dict[str, str]:
    """Experiment name -> its state in `dvc queue status` (Queued, Running, Success, Failed)."""
    states = {}
    for line in repo.dvc("queue", "status").splitlines():
        words = line.split()
        if len(words) >= 4 and words[-1] in ("Queued", "Running", "Success", "Failed"):
            states[words[1]] = words[-1]
    return states


def start_workers(repo: RepoCopy, log: Path) -> None:
    """`dvc queue start -j 2`. Its workers are forked with the caller's stdout and stderr: a
    captured pipe would stay open, and the call block, until the queue drains; so a file."""
    with log.open("ab") as out:
        done = subprocess.run(
            [sys.executable, "-m", "dvc", "queue", "start", "-j", "2"],
            cwd=repo.path,
            env=repo.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    assert done.returncode == 0, log.read_text()[-3000:]


def run_queue(repo: RepoCopy, names: set[str], log: Path) -> float:
    """Start two workers, wait until the named experiments end; all must succeed. Wall time."""
    started = time.monotonic()
    start_workers(repo, log)
    deadline = started + QUEUE_TIMEOUT_SECONDS
    while True:
        states = {k: v for k, v in queue_states(repo).items() if k in names}
        if set(states) == names and all(s in ("Success", "Failed") for s in states.values()):
            break
        assert time.monotonic() < deadline, f"the queue did not finish: {states}"
        time.sleep(POLL_SECONDS)
    failed = [n for n, s in states.items() if s != "Success"]
    logs = "\n".join(repo.dvc("queue", "logs", n, check=False)[-3000:] for n in failed)
    assert not failed, f"experiments failed: {failed}\n{logs}"
    return time.monotonic() - started


def queue_sweep(repo: RepoCopy, param: str, values: tuple[str, ...]) -> set[str]:
    out = repo.dvc("exp", "run", "--queue", "-S", f"{param}={','.join(values)}")
    names = {
        line.split("'")[1] for line in out.splitlines() if line.startswith("Queued experiment")
    }
    assert len(names) == len(values), out
    return names


def queue_experiments(repo: RepoCopy, *settings: tuple[str, ...]) -> dict[tuple[str, ...], str]:
    """One queued experiment per set of `-S` settings (each `key=value`): set -> its name."""
    names = {}
    for each in settings:
        out = repo.dvc("exp", "run", "--queue", *(a for s in each for a in ("-S", s)))
        (line,) = [x for x in out.splitlines() if x.startswith("Queued experiment")]
        names[each] = line.split("'")[1]
    return names


BUILD_FREE_TASKS = {"agent", "answer", "judge", "equivalence", "embedding"}
"""What answering and judging ask of the model (with the embeddings of mem0's search queries);
a build's chat tasks (extraction, resolution) are not among them. That the build's embeddings are
none of the embedding requests is shown by each run's own ingest record (`requests_sent`)."""


def committed_json(repo: RepoCopy, rev: str, path: str) -> Any:
    done = subprocess.run(
        ["git", "show", f"{rev}:{path}"],
        cwd=repo.path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def check_regimes_and_budget(repo: RepoCopy, server: ServerProcess, sweep: dict[str, str]) -> None:
    """The equal-constraints queue (module doc); `sweep`: the first sweep's system -> experiment."""
    before = len(server.requests())
    one_shot = ("system=graphrag", "answer.regime=one_shot")
    agent = ("system=mem0", "answer.regime=agent")
    budgets = [("system=mem0", f"mem0.top_k={k}") for k in (1, 5)]
    names = queue_experiments(repo, one_shot, agent, *budgets)
    seconds = run_queue(repo, set(names.values()), repo.path.parent / "workers.log")
    print(f"\nregimes and top_k sweep ({len(names)} experiments) with -j 2: {seconds:.0f} s")
    new = server.requests()[before:]
    tasks = {e.task for e in new}
    assert new and tasks <= BUILD_FREE_TASKS, tasks  # no build task at the server
    print(f"calls at the server: {len(new)}, by task {dict(Counter(e.task for e in new))}")

    columns = [
        sweep["graphrag"],
        names[one_shot],
        sweep["mem0"],
        names[agent],
        *(names[b] for b in budgets),
    ]
    table = compare(repo, *columns)
    print(table)
    rows = list(csv.DictReader(io.StringIO((repo.path / "reports/compare.csv").read_text())))
    revs = {r["experiment"]: r["rev"] for r in rows}
    for each in names.values():  # 0 build calls: each built its memory from the call cache
        sent = committed_json(repo, revs[each], "metrics/wall_time/ingest.json")["requests_sent"]
        took = committed_json(repo, revs[each], "metrics/usage/ingest.json")
        assert set(sent.values()) == {0}, (each, sent)
        assert sum(role["calls"] for role in took.values()) > 0, took  # what the memory took
    regime = {r["experiment"]: r["value"] for r in rows if r["key"] == "regime"}
    assert regime == {
        sweep["graphrag"]: "agent (own)",
        names[one_shot]: "one_shot",
        sweep["mem0"]: "one_shot (own)",
        names[agent]: "agent",
        **{names[b]: "one_shot (own)" for b in budgets},
    }
    context = {r["experiment"]: float(r["value"]) for r in rows if r["key"] == "context_tokens_p95"}
    assert context[names[budgets[0]]] < context[sweep["mem0"]]  # top_k 1 against its 30
    assert context[names[budgets[0]]] <= context[names[budgets[1]]]
    pairs = list(csv.DictReader(io.StringIO((repo.path / "reports/compare_pairs.csv").read_text())))
    paired = {frozenset((p["left"], p["right"])) for p in pairs}
    labels = {r["experiment"]: r["column"] for r in rows}
    assert frozenset((labels[sweep["graphrag"]], labels[names[agent]])) in paired
    assert frozenset((labels[sweep["mem0"]], labels[names[agent]])) not in paired
    assert "different answer regimes" in table


def ledgers(repo: RepoCopy) -> list[Path]:
    return sorted((repo.path / ".cache" / "llm").glob("budget-*.json"))


def compare(repo: RepoCopy, *names: str) -> str:
    return repo.python("-m", "commands.compare", *names, timeout=300)


def traces(repo: RepoCopy) -> list[dict[str, Any]]:
    text = (repo.path / "data" / "answer" / "traces.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def check_baseline(repo: RepoCopy, system: str) -> dict[str, Any]:
    """What every baseline's run shares, in the workspace; returns metrics/report.json."""
    assert repo.read_json("data/ingest/run.json")["system"] == system
    assert repo.read_json("data/ingest/run.json")["models"] == []  # built without a model
    assert repo.read_json("data/answer/run.json")["system"] == system
    report = repo.read_json("metrics/report.json")
    usage = usage_of(repo)
    assert "extraction" not in usage and "resolution" not in usage  # built without a model
    assert (
        usage["agent"]["calls"] == 2  # one `answer` call per question
        and report["cost_calls"]["total"] == 2 + usage["judge"]["calls"]
    )
    assert report["questions"]["overall"] == 2
    assert_metrics_layout(repo, LITE_ASKED)
    record = (repo.path / "reports" / "memory.md").read_text(encoding="utf-8")
    assert record.startswith(f"# BEAM memory benchmark: {system}, lite run")
    assert f"Memory system under test: **{system}**" in record
    page = (repo.path / "reports" / "run.html").read_text(encoding="utf-8")
    assert f'"system":"{system}"' in page
    return report


def check_baselines(repo: RepoCopy, experiments: dict[str, str]) -> None:
    """Each baseline's experiment, applied to the workspace (module doc)."""
    repo.dvc("exp", "apply", experiments["rag"])
    report = check_baseline(repo, "rag")
    rag = traces(repo)
    assert all(t["reached_ids"] and set(t["reached_message_ids"]) <= LITE_MESSAGES for t in rag)
    assert all(t["reached_ids"][0].startswith("conv17:s") for t in rag)  # chunk ids
    assert report["evidence_recall"]["overall"] > 0
    assert "## Memory (rag)" in (repo.path / "reports" / "memory.md").read_text()

    repo.dvc("exp", "apply", experiments["full_context"])
    check_baseline(repo, "full_context")
    summary = repo.read_json("data/answer/summary.json")
    assert summary["questions_cut_to_fit"] == 2 and summary["dropped_tokens"] > 0
    for trace in traces(repo):
        kept = set(trace["reached_message_ids"])
        assert kept and kept < LITE_MESSAGES and 157 in kept  # the newest kept, not all
        assert 0 < trace["max_context_tokens"] <= 1000  # the window less the reply's room

    repo.dvc("exp", "apply", experiments["no_memory"])
    report = check_baseline(repo, "no_memory")
    assert all(t["answer"].startswith("I don't know") for t in traces(repo))
    assert report["score"]["overall"] == 0  # the floor every system must beat
    assert repo.read_json("data/ingest/graphs.json") == {"total": {}, "conv17": {}}


def test_a_queued_sweep_shares_jars_cache_and_ledger_and_compares_side_by_side(
    tmp_path: Path, hub_mirror: HubMirror
) -> None:
    with repo_copy(tmp_path, hub_mirror) as repo:
        repo.use_checkout_jars()
        server = ServerProcess(tmp_path / "served.jsonl", cwd=repo.path, env=repo.env).start()
        try:
            endpoint = {"model": MODEL, "api_base": server.api_base}
            roles = {r: endpoint for r in ("resolution", "agent")}
            roles["extraction"] = {**endpoint, "structured_output": "json_schema"}
            roles["embedding"] = {"model": "openai/test-embedder", "api_base": server.api_base}
            # the default lite caps stay: the one shared ledger holds the whole sweep under them
            repo.update_params({"models": roles | {"judge": {"model": None, "api_base": None}}})
            if "full_context" in yaml.safe_load((repo.path / "params.yaml").read_text()):
                # the served model's window (litellm knows none for `openai/test-model`), smaller
                # than the lite chat (about 1.3k tokens): full_context must cut it
                repo.update_params({"full_context": {"context_tokens": 1100, "reply_tokens": 100}})
            repo.env |= {"OPENAI_API_KEY": "dummy"}
            started = time.monotonic()
            repo.dvc("repro", "judge-check")
            print(f"\nset-up (data stages, judge check): {time.monotonic() - started:.0f} s")
            git(repo.path, "add", "-A")
            git(repo.path, "commit", "-q", "-m", "served model; data stages and judge check run")
            before = len(server.requests())
            assert before > 0

            param, values = swept_param(repo)
            first = queue_sweep(repo, param, values)
            seconds = run_queue(repo, first, tmp_path / "workers.log")
            print(f"\nsweep of {len(values)} ({param}) with -j 2: {seconds:.0f} s")
            served = len(server.requests())
            assert served > before, "the sweep made no model call"

            table = compare(repo)
            print(table)
            header = next(line for line in table.splitlines() if line.startswith("| metric |"))
            assert len(header.strip("| ").split(" | ")) == 1 + len(values), header
            rows = list(
                csv.DictReader(io.StringIO((repo.path / "reports/compare.csv").read_text()))
            )
            assert {r["experiment"] for r in rows} == first
            overall = [r for r in rows if r["group"] == "score" and r["key"] == "overall"]
            assert len(overall) == len(values) and all(r["value"] for r in overall)
            swept = {r["value"] for r in rows if r["key"] == param}
            assert swept == set(values), swept  # the column's param, from its own params.yaml
            assert (repo.path / "reports/compare.svg").read_bytes().startswith(b"<?xml")
            # each experiment's per-question scores and build calls, read from its own commit
            build = {
                r["experiment"]: r["value"]
                for r in rows
                if r["key"] == "build_calls_per_conversation"
            }
            assert set(build) == first and all(build.values()), build
            pairs = list(
                csv.DictReader(io.StringIO((repo.path / "reports/compare_pairs.csv").read_text()))
            )
            asked = 1 + 2  # overall and lite's two abilities
            regimes = Counter(r["value"] for r in rows if r["key"] == "regime")
            like = sum(n * (n - 1) // 2 for n in regimes.values())  # pairs of one regime only
            assert len(pairs) == like * asked, (regimes, pairs)
            assert "## Paired differences" in table
            unlike = len(values) * (len(values) - 1) // 2 - like
            assert table.count("different answer regimes") == unlike, table

            (ledger,) = ledgers(repo)  # one ledger: every experiment's stages charged it
            spent = json.loads(ledger.read_text())
            assert spent["calls"] == served, (spent, served)  # every call the server saw
            assert not spent["open"]

            again = "rag" if "rag" in values else values[-1]
            second = queue_sweep(repo, param, (again,))  # a fresh copy makes the point
            seconds = run_queue(repo, second, tmp_path / "workers.log")
            print(f"second sweep, from the call cache: {seconds:.0f} s")
            assert len(server.requests()) == served, "the second sweep called the model"
            assert ledgers(repo) == [ledger]
            assert json.loads(ledger.read_text())["calls"] == served
            assert len(compare(repo, *sorted(second)).splitlines()) > 10

            if param == "system":
                by_system = {r["value"]: r["experiment"] for r in rows if r["key"] == param}
                if "regime" in yaml.safe_load((repo.path / "params.yaml").read_text())["answer"]:
                    check_regimes_and_budget(repo, server, by_system)
                check_baselines(repo, {b: by_system[b] for b in BASELINES})
        finally:
            repo.dvc("queue", "stop", "--kill", check=False, timeout=120)
            server.kill()
