"""Model faults through the real litellm path, stage by stage.

Every role of a lite copy of the repo talks to the scripted test model served over HTTP
(tests/support/scripted_server.py, its own process) as `openai/test-model`. After a clean
`dvc repro` gives the reference outputs, faults are planned per task: 429, 500, a hang past the
timeout, a cut-off JSON reply, tool arguments that are not JSON, an empty reply, and the server
gone. A transient fault (a few attempts) is recovered with outputs identical to the clean run's;
a persistent one stops the stage with exit 3 and no outputs, and once the server is healthy again
the next run makes only the requests that had failed (or were never made) and ends with the clean
run's outputs. With `answer.max_failed_share: 1.0` a persistent agent fault is reported beside
the score instead.

Stages are run as `python -m stages.<name>` (what `dvc repro` runs) for most cases; the clean run,
the server-down case, one judge case and the tolerated share go through `dvc repro` (after a
params change, so that DVC must run the stage rather than restore its cached outs). Several
faults share a run where they hit different requests (`FaultPlan.request`), at most three per
request so that each one recovers within `llm.max_attempts`. Each case starts with an empty call
cache so that its stage's requests all reach the server; backoff waits are off
(BEAM_LLM_NO_BACKOFF=1) and the timeout is 3 s, so a hang costs 3 s per attempt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.judge import equivalence_request, item_request
from bench.scorer_prompts import equivalence_messages, extract_judge_prompts, item_messages
from clients.files import read_jsonl
from clients.llm import client as llm_module
from clients.llm.client import LlmClient
from clients.llm.port import ChatRequest, Message
from schemas.params import LlmParams, ModelRef
from schemas.traces import Trace
from systems import agent_loop
from systems.graphrag import agent, decide, extract
from systems.graphrag import prompts as graphrag_prompts
from tests.conftest import skip_or_fail
from tests.support.e2e_repo import COMMAND_TIMEOUT_SECONDS, RepoCopy, repo_copy
from tests.support.hub_mirror import MIRROR_ROOT, HubMirror
from tests.support.models import scripted_client
from tests.support.openai_server import LoopbackServer
from tests.support.scorer_standin import compute_metrics_py, prompts_py
from tests.support.scripted_server import (
    CYPHER_BOMB,
    FaultKind,
    FaultPlan,
    LogEntry,
    ScriptedResponder,
    ServerProcess,
)

pytestmark = [pytest.mark.e2e, pytest.mark.beam, pytest.mark.neo4j, pytest.mark.slow]

MODEL = "openai/test-model"
MAX_ATTEMPTS = 4
TIMEOUT_SECONDS = 3
STAGE_OUTS = {
    "ingest": ("data/ingest", "metrics/wall_time/ingest.json"),
    "answer": ("data/answer", "metrics/wall_time/answer.json"),
    "judge": ("data/judge", "metrics/wall_time/judge.json"),
}
SNAPSHOT = (
    "data/ingest",
    "data/answer",
    "data/judge",
    "metrics",
    "reports",
    "dvc.lock",
    "params.yaml",
    "settings.yaml",  # a test's setting (a Neo4j timeout) would leave the report stale after it
    "pins.yaml",
)
TIMING_KEYS = frozenset(
    {
        "seconds",
        "seconds_total",
        "seconds_mean",
        # latency (schemas/wall_time.py): the answers' and the builds' seconds
        "answer_seconds",
        "retrieval_seconds",
        "build_seconds",
        "build_seconds_by_conversation",
        "requests_sent",  # a resumed run sends fewer (the call cache has the rest)
    }
)
STAGE_TASKS = {"ingest": ("extract", "resolve", "link"), "answer": ("agent",), "judge": ("judge",)}


# -- the served model is the scripted model -------------------------------------------------------
def test_the_served_model_replies_as_the_scripted_model_does(tmp_path: Path) -> None:
    """The prompts the stages build, through litellm to the server, get the replies
    `scripted/rules` gives in-process (values, texts and tool calls)."""
    prompts = extract_judge_prompts(prompts_py(), compute_metrics_py())
    chunk = (
        "Session 1, dated 2024-03-02 (March 2, 2024).\nChat excerpt:\n\n[message 3 · user]\n"
        "I moved to Berlin in March and I prefer green tea over coffee every morning.\n"
    )
    first_agent_turn = (
        Message.system(graphrag_prompts.AGENT.text),
        Message.user("Where did I move?"),
    )

    def request(messages: Sequence[dict[str, str]], task: str, schema: Any = None) -> ChatRequest:
        return ChatRequest(
            messages=tuple(Message.model_validate(m) for m in messages),
            task=task,
            prompt_version="test",
            schema=schema,
        )

    requests = [
        request(
            [
                {"role": "system", "content": graphrag_prompts.EXTRACT.text},
                {"role": "user", "content": chunk},
            ],
            extract.TASK,
            extract.ExtractionReply,
        ),
        request(
            [
                {"role": "system", "content": graphrag_prompts.RESOLVE.text},
                {"role": "user", "content": 'Pairs:\n1. [Person] A: "Anna" | B: "Anna Smith"'},
            ],
            decide.RESOLVE_TASK,
            decide.ResolveReply,
        ),
        ChatRequest(
            messages=first_agent_turn,
            task=agent_loop.TASK,
            prompt_version="test",
            tools=agent.TOOLS,
        ),
        item_request(
            item_messages(prompts, "Where?", "The user moved to Berlin", "Berlin."), prompts
        ),
        equivalence_request(
            equivalence_messages(prompts, "moved to Berlin", "Berlin move"), prompts
        ),
    ]
    params = LlmParams(
        timeout_seconds=10, max_attempts=1, concurrency=2, seed=0, cache=False, cache_dir="unused"
    )
    responder = ScriptedResponder()
    with LoopbackServer() as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", "dummy")
        server.set_responder(responder)
        served = LlmClient("agent", ModelRef(model=MODEL, api_base=server.api_base), params)
        local = scripted_client("agent", tmp_path)
        for req in requests:
            got, want = served.complete(req), local.complete(req)
            assert got.error is None, (req.task, got.error)
            assert (got.text, got.value) == (want.text, want.value), req.task
            assert [(c.name, c.arguments) for c in got.tool_calls] == [
                (c.name, c.arguments) for c in want.tool_calls
            ], req.task
    assert [e.task for e in responder.log] == [r.task for r in requests]
    assert all(e.outcome == "ok" for e in responder.log)


# -- the shared copy, its server and the clean run -----------------------------------------------
@dataclass
class Bench:
    repo: RepoCopy
    server: ServerProcess
    reference: Path
    """The clean run's outputs (SNAPSHOT), to compare with and to restore between cases."""
    clean_requests: list[LogEntry]

    # -- state between cases
    def restore(self) -> None:
        """Back to the clean run's outputs, an empty call cache and a healthy server."""
        if not self.server.running:
            self.server.start()
        self.server.set_faults()
        for rel in SNAPSHOT:
            target, source = self.repo.path / rel, self.reference / rel
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
            if source.is_dir():
                shutil.copytree(source, target)
            elif source.exists():
                shutil.copy2(source, target)
        self.empty_cache()

    def empty_cache(self) -> None:
        shutil.rmtree(self.repo.path / ".cache" / "llm", ignore_errors=True)

    # -- running
    def run(self, stage: str, *plans: FaultPlan) -> Run:
        """One stage process with these faults planned; the requests the server saw."""
        self.server.set_faults(*plans)
        return self.run_without_server(stage)

    def run_without_server(self, stage: str) -> Run:
        before = len(self.server.requests())
        started = time.monotonic()
        done = self.repo.stage(stage)
        seconds = time.monotonic() - started
        requests = self.server.requests()[before:]
        return Run(stage, done.returncode, done.stdout + done.stderr, requests, seconds)

    def repro(self, *plans: FaultPlan, stage: str = "dvc repro", args: Sequence[str] = ()) -> Run:
        """`dvc repro [args]` with these faults planned (its exit code is not checked); `stage`
        names the stage the case is about."""
        self.server.set_faults(*plans)
        before = len(self.server.requests())
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "dvc", "repro", *args],
            cwd=self.repo.path,
            env=self.repo.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )
        seconds = time.monotonic() - started
        output = done.stdout + done.stderr
        return Run(stage, done.returncode, output, self.server.requests()[before:], seconds)

    # -- comparing
    def differences(self, stage: str) -> list[str]:
        """Files of a stage's outs that differ from the clean run's (data outs byte for byte; no
        out holds a wall-clock value), and its metrics with timing aside."""
        folder, metrics = STAGE_OUTS[stage]
        found = _folder_differences(self.reference / folder, self.repo.path / folder)
        want, got = self.reference / metrics, self.repo.path / metrics
        if not got.is_file():
            found.append(f"{metrics} missing")
        elif _without_timing(json.loads(got.read_text())) != _without_timing(
            json.loads(want.read_text())
        ):
            found.append(metrics)
        return found

    def report_differences(self) -> list[str]:
        """Sections of metrics/report.json that differ from the clean run's (cost aside: a
        healed run's calls, cache hits and seconds are its own)."""
        want, got = (
            json.loads((root / "metrics" / "report.json").read_text())
            for root in (self.reference, self.repo.path)
        )
        return sorted(
            k
            for k in set(want) | set(got)
            if not k.startswith("cost_") and want.get(k) != got.get(k)
        )

    def outs_absent(self, stage: str) -> list[str]:
        return [rel for rel in STAGE_OUTS[stage] if (self.repo.path / rel).exists()]


@dataclass
class Run:
    stage: str
    returncode: int
    output: str
    requests: list[LogEntry]
    seconds: float

    def attempts(self) -> Counter[str]:
        """HTTP requests per request key."""
        return Counter(e.key for e in self.requests)

    def succeeded(self) -> set[str]:
        return {e.key for e in self.requests if e.outcome == "ok"}

    def failed(self) -> set[str]:
        return {e.key for e in self.requests} - self.succeeded()

    def faulted(self, kind: str) -> set[str]:
        return {e.key for e in self.requests if e.outcome == kind}

    def describe(self) -> str:
        return (
            f"{self.stage} exit {self.returncode} in {self.seconds:.1f} s:\n{self.output[-3000:]}"
        )


def _folder_differences(want: Path, got: Path) -> list[str]:
    """Files that differ, each with the fields that differ where the files are JSON lines."""
    if not got.is_dir():
        return [f"{got.name}/ missing"]
    names = {p.relative_to(want) for p in want.rglob("*") if p.is_file()}
    names |= {p.relative_to(got) for p in got.rglob("*") if p.is_file()}
    found = []
    for name in sorted(names):
        a, b = want / name, got / name
        if not (a.is_file() and b.is_file()):
            found.append(f"{want.name}/{name}: only in {'got' if b.is_file() else 'clean run'}")
        elif a.read_bytes() != b.read_bytes():
            found.append(f"{want.name}/{name}: {_fields_that_differ(a, b) or 'bytes differ'}")
    return found


def _fields_that_differ(a: Path, b: Path) -> str:
    """The fields that differ between two JSON-lines files (a clue for the reader)."""
    if a.suffix != ".jsonl":
        return "bytes differ"
    left, right = a.read_text().splitlines(), b.read_text().splitlines()
    if len(left) != len(right):
        return f"{len(left)} lines -> {len(right)}"
    fields: dict[str, tuple[Any, Any]] = {}
    for x, y in ((json.loads(x), json.loads(y)) for x, y in zip(left, right, strict=True)):
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                fields.setdefault(key, (x.get(key), y.get(key)))
    return "; ".join(f"{k}: {str(v[0])[:80]} -> {str(v[1])[:80]}" for k, v in fields.items())


def _without_timing(value: Any) -> Any:
    """Metrics without wall-clock figures and the model layer's own accounting (attempts,
    retries, cache hits and tokens differ by design between a clean, a faulty and a cached run)."""
    if isinstance(value, dict):
        return {
            k: _without_timing(v)
            for k, v in value.items()
            if k not in TIMING_KEYS and not k.startswith("llm_")
        }
    return value


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    if not MIRROR_ROOT.is_dir():
        skip_or_fail(f"the BEAM mirror folder is missing: {MIRROR_ROOT}")
    root = tmp_path_factory.mktemp("faults")
    with HubMirror(MIRROR_ROOT) as hub, repo_copy(root, hub) as repo:
        server = ServerProcess(root / "served.jsonl", cwd=repo.path, env=repo.env).start()
        try:
            endpoint = {"model": MODEL, "api_base": server.api_base}
            repo.update_params(
                {
                    "models": {
                        "extraction": endpoint,
                        "resolution": endpoint,
                        "agent": endpoint,
                        "judge": {"model": None, "api_base": None},
                    },
                    "llm": {"timeout_seconds": TIMEOUT_SECONDS, "max_attempts": MAX_ATTEMPTS},
                    "budget": {
                        "lite": {"calls": 1_000_000, "tokens": 1_000_000_000},
                        "full": {"calls": 1_000_000, "tokens": 1_000_000_000},
                    },
                }
            )
            repo.env |= {"OPENAI_API_KEY": "dummy", llm_module.NO_BACKOFF_ENV: "1"}
            started = time.monotonic()
            out = repo.dvc("repro")
            print(f"clean dvc repro: {time.monotonic() - started:.1f} s")
            assert "Running stage 'report'" in out, out
            reference = root / "reference"
            for rel in SNAPSHOT:
                source = repo.path / rel
                if source.is_dir():
                    shutil.copytree(source, reference / rel)
                else:
                    (reference / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, reference / rel)
            clean = server.requests()
            assert clean and all(e.outcome == "ok" for e in clean)
            assert len({e.key for e in clean}) == len(clean), "the clean run retried a request"
            yield Bench(repo, server, reference, clean)
        finally:
            server.kill()


@pytest.fixture
def clean(bench: Bench) -> Iterator[Bench]:
    """The shared copy at its clean state before a case (and put back after it)."""
    bench.restore()
    yield bench
    bench.restore()


# -- what a case must show ------------------------------------------------------------------------
def assert_recovered(bench: Bench, run: Run, plans: Sequence[FaultPlan]) -> None:
    """Exit 0, every planned fault served and then healed, outs as in the clean run."""
    assert run.returncode == 0, run.describe()
    served = Counter(e.outcome for e in run.requests)
    for kind in {p.kind for p in plans}:
        assert served[kind] == sum(p.times or 0 for p in plans if p.kind == kind), (kind, served)
    assert not run.failed(), f"requests never answered: {run.failed()}\n{run.describe()}"
    assert bench.differences(run.stage) == [], run.describe()


def assert_stopped(
    bench: Bench, run: Run, failed: int, total: int, what: str, *, by_dvc: bool = False
) -> None:
    """Exit 3 (under `dvc repro`: its failure naming exit 3) with the one-line message, and no
    outs for DVC to lock."""
    if by_dvc:
        assert run.returncode != 0 and "exited with 3" in run.output, run.describe()
    else:
        assert run.returncode == 3, run.describe()
    lines = [line for line in run.output.splitlines() if "failed after retries" in line]
    assert len(lines) == 1, run.describe()
    line = lines[0]
    assert f"{failed} of {total} {what}" in line, line
    assert f"gave up after {MAX_ATTEMPTS} attempts" in line, line  # the last error
    assert "run `dvc repro` again: finished calls are cached" in line.lower(), line
    assert bench.outs_absent(run.stage) == [], f"outs left behind: {bench.outs_absent(run.stage)}"


def assert_gave_up(run: Run, kinds: Sequence[FaultKind]) -> None:
    """Each persistently faulted request got exactly `llm.max_attempts` attempts."""
    for kind in kinds:
        keys = run.faulted(kind)
        assert keys, f"no request got {kind}\n{run.describe()}"
        attempts = {key: run.attempts()[key] for key in keys}
        assert set(attempts.values()) == {MAX_ATTEMPTS}, (kind, attempts)
        assert not keys & run.succeeded(), kind


def assert_healed(before: Run, heal: Run) -> None:
    """The healthy run asked again for what had failed and for nothing that had succeeded."""
    assert all(e.outcome == "ok" for e in heal.requests), heal.describe()
    asked = {e.key for e in heal.requests}
    repeated = asked & before.succeeded()
    assert not repeated, f"{len(repeated)} finished calls made again"
    assert before.failed() <= asked, f"failed calls not asked again: {before.failed() - asked}"
    assert len(heal.requests) == len(asked), "a healthy run asks each request once"


# -- transient faults: recovered, outputs identical ------------------------------------------------
def test_ingest_recovers_from_transient_faults_with_identical_outputs(clean: Bench) -> None:
    plans = (
        FaultPlan("extract", "rate_limit", times=2, request=0),
        FaultPlan("extract", "server_error", times=1, request=1),
        FaultPlan("extract", "hang", times=1, request=2),
        FaultPlan("extract", "empty", times=1, request=3),
        FaultPlan("resolve", "malformed", times=2),  # the same bad reply twice: a repair turn
        FaultPlan("link", "malformed", times=1),
    )
    run = clean.run("ingest", *plans)
    assert_recovered(clean, run, plans)
    assert any(e.repair and e.outcome == "ok" for e in run.requests if e.task == "resolve")


def test_answer_recovers_from_transient_faults_with_identical_outputs(clean: Bench) -> None:
    plans = (
        FaultPlan("agent", "bad_tool_args", times=1, request=0),
        FaultPlan("agent", "hang", times=1, request=0),
        FaultPlan("agent", "empty", times=1, request=1),
        FaultPlan("agent", "rate_limit", times=2, request=2),
        FaultPlan("agent", "server_error", times=1, request=3),
    )
    run = clean.run("answer", *plans)
    assert_recovered(clean, run, plans)


def test_answer_outs_are_byte_identical_between_two_runs(clean: Bench) -> None:
    """DVC outs must not carry wall time: a healthy re-run gives the same bytes."""
    run = clean.run("answer")
    assert run.returncode == 0, run.describe()
    assert clean.differences("answer") == []


def test_a_runaway_query_costs_only_its_tool_call_and_a_repro_from_the_cache_repeats_it(
    clean: Bench,
) -> None:
    """A hostile model (what a prompt injection in the chat aims at): one question's first agent
    turn calls the free Cypher tool with a read that Neo4j stops neither at its timeout nor when
    terminated (`CYPHER_BOMB`), while the other question is answered beside it (llm.concurrency
    2). The stage exits 0; the bomb comes back to the model as the tool's error and its question
    goes on; the server is freed by a restart with its graph; the other question's trace is the
    clean run's. A forced `dvc repro` of the stage from the call cache (no request reaches the
    server, the bomb is replayed) writes the same outs."""
    clean.repo.update_params({"graph": {"query_timeout_seconds": 2}})  # not a dep: no re-run
    plan = FaultPlan("agent", "cypher_bomb", times=None, request=0)
    run = clean.run("answer", plan)
    assert run.returncode == 0, run.describe()
    assert len(run.faulted("cypher_bomb")) == 1, run.describe()
    assert "restarting" in run.output and "re-importing its graph" in run.output, run.describe()
    traces_file = clean.repo.path / "data" / "answer" / "traces.jsonl"
    traces = read_jsonl(traces_file, Trace)
    reference = {
        t.question_id: t for t in read_jsonl(clean.reference / "data/answer/traces.jsonl", Trace)
    }

    def bombed(trace: Trace) -> bool:
        return any(
            call.name == "read_only_cypher" and "longer than" in (call.error or "")
            for call in trace.tool_calls
        )

    hit = [t for t in traces if bombed(t)]
    assert len(hit) == 1 and hit[0].error is None and hit[0].answer, [t.question_id for t in hit]
    assert (hit[0].tool_calls[0].arguments or {}).get("query") == CYPHER_BOMB
    others = [t for t in traces if t.question_id != hit[0].question_id]
    assert others and all(t == reference[t.question_id] for t in others)
    written = traces_file.read_bytes()

    again = clean.repro(stage="answer", args=("--force", "--single-item", "answer"))
    assert again.returncode == 0, again.describe()
    assert "Running stage 'answer'" in again.output, again.describe()
    assert again.requests == [], "a repro from the call cache asked the model server"
    assert traces_file.read_bytes() == written


def test_judge_recovers_from_transient_faults_with_identical_outputs(clean: Bench) -> None:
    plans = (
        FaultPlan("judge", "malformed", times=2, request=0),
        FaultPlan("judge", "rate_limit", times=1, request=1),
        FaultPlan("judge", "empty", times=1, request=1),
        FaultPlan("judge", "hang", times=1, request=2),
        FaultPlan("judge", "server_error", times=1, request=2),
    )
    run = clean.run("judge", *plans)
    assert_recovered(clean, run, plans)


# -- persistent faults: exit 3, nothing kept; healed, only the failed calls again ----------------
def test_ingest_stops_on_persistent_transport_faults_and_resumes(clean: Bench) -> None:
    plans = (
        FaultPlan("extract", "rate_limit", times=None, request=1),
        FaultPlan("extract", "server_error", times=None, request=2),
        FaultPlan("extract", "hang", times=None, request=3),
    )
    run = clean.run("ingest", *plans)
    assert_stopped(clean, run, 3, 4, "extraction calls of conv17")
    assert_gave_up(run, ("rate_limit", "server_error", "hang"))
    assert {e.task for e in run.requests} == {"extract"}, "no resolution on a partial graph"

    heal = clean.run("ingest")
    assert heal.returncode == 0, heal.describe()
    assert_healed(run, heal)
    assert Counter(e.task for e in heal.requests) == {"extract": 3, "resolve": 1, "link": 1}
    assert clean.differences("ingest") == []


def test_ingest_stops_on_a_persistently_malformed_reply_and_resumes(clean: Bench) -> None:
    run = clean.run("ingest", FaultPlan("link", "malformed", times=None))
    assert_stopped(clean, run, 1, 1, "link calls of conv17")
    assert_gave_up(run, ("malformed",))

    heal = clean.run("ingest")
    assert heal.returncode == 0, heal.describe()
    assert_healed(run, heal)
    assert [e.task for e in heal.requests] == ["link"]
    assert clean.differences("ingest") == []


def test_ingest_stops_when_the_server_goes_down_and_dvc_repro_resumes(clean: Bench) -> None:
    """Under `dvc repro` (after a params change that makes ingest run again), the server process
    dies at the link call, after extraction and resolution succeeded. The change is
    `ingest.max_failed_share` written into params.yaml, as `dvc exp run -S
    ingest.max_failed_share=0.1` does: a key there wins over settings.yaml and is tracked."""
    clean.repo.set_in_params_yaml("ingest.max_failed_share", 0.1)  # 1 of 1 is still too many
    run = clean.repro(FaultPlan("link", "down"), stage="ingest")
    assert clean.server.wait_down() == 0
    assert_stopped(clean, run, 1, 1, "link calls of conv17", by_dvc=True)
    assert "Connection" in run.output, run.describe()
    assert "Running stage 'ingest'" in run.output, run.describe()

    clean.server.restart()
    heal = clean.repro()
    assert heal.returncode == 0, heal.describe()
    assert_healed(run, heal)
    assert [e.task for e in heal.requests] == ["link"]
    assert "Running stage 'ingest'" in heal.output, heal.output
    for downstream in ("answer", "judge"):  # identical graph: DVC has nothing to redo there
        assert f"Running stage '{downstream}'" not in heal.output, heal.output
    for stage in STAGE_OUTS:
        assert clean.differences(stage) == [], stage
    assert clean.report_differences() == []


def test_answer_stops_on_persistent_reply_faults_and_resumes(clean: Bench) -> None:
    """Question 1's second call gets tool arguments that are not JSON, question 2's first an
    empty reply, every time."""
    plans = (
        FaultPlan("agent", "bad_tool_args", times=None, request=1),
        FaultPlan("agent", "empty", times=None, request=2),
    )
    run = clean.run("answer", *plans)
    assert_stopped(clean, run, 2, 2, "questions")
    assert_gave_up(run, ("bad_tool_args", "empty"))

    heal = clean.run("answer")
    assert heal.returncode == 0, heal.describe()
    assert_healed(run, heal)
    assert len(heal.requests) == 3  # question 1's second call, question 2's two
    assert clean.differences("answer") == []


def test_judge_stops_on_persistent_faults_and_dvc_repro_resumes(clean: Bench) -> None:
    plans = (
        FaultPlan("judge", "malformed", times=None, request=0),
        FaultPlan("judge", "empty", times=None, request=1),
    )
    # written into params.yaml, as `-S` does (settings.yaml would leave the report stale), with
    # a tracked key that changes nothing in lite (no event ordering), so that judge runs again
    clean.repo.set_in_params_yaml("judge.max_failed_share", 0.1)  # 2 of 3 is still too many
    clean.repo.set_in_params_yaml("judge.max_equivalence_calls", 201)
    run = clean.repro(*plans, stage="judge")
    assert_stopped(clean, run, 2, 3, "judge calls", by_dvc=True)
    assert_gave_up(run, ("malformed", "empty"))

    heal = clean.repro()
    assert heal.returncode == 0, heal.describe()
    assert_healed(run, heal)
    assert len(heal.requests) == 2
    # the same outs as the clean run: the report, which reads results only, has nothing to redo
    assert "Running stage 'judge'" in heal.output and "Running stage 'report'" not in heal.output
    for stage in STAGE_OUTS:
        assert clean.differences(stage) == [], stage
    assert clean.report_differences() == []


def test_judge_stops_before_any_call_when_the_server_is_down(clean: Bench) -> None:
    clean.server.kill()
    run = clean.run_without_server("judge")
    assert run.returncode == 2, run.describe()
    assert "unreachable" in run.output and clean.server.api_base in run.output, run.describe()
    assert clean.outs_absent("judge") == []


# -- a tolerated share: the run finishes and reports the failures ---------------------------------
def test_answer_with_a_tolerated_share_reports_failed_questions_beside_the_score(
    clean: Bench,
) -> None:
    clean.repo.set_in_params_yaml("answer.max_failed_share", 1.0)  # tracked: answer runs again
    heal = clean.repro(FaultPlan("agent", "server_error", times=None, request=0))
    assert heal.returncode == 0, heal.describe()
    assert "Running stage 'answer'" in heal.output, heal.output
    failed = [e for e in heal.requests if e.outcome == "server_error"]
    assert len(failed) == MAX_ATTEMPTS
    traces = [json.loads(line) for line in (clean.repo.path / "data/answer/traces.jsonl").open()]
    # the agent answers questions concurrently: the faulted first request is either question's
    assert sorted(t["error"] is not None for t in traces) == [False, True]
    report = clean.repo.read_json("metrics/report.json")
    assert report["failures"]["questions_in_error"] == 1
    assert report["score"]["overall"] is not None
    assert report["questions"]["overall"] == 2
    record = (clean.repo.path / "reports/memory.md").read_text()
    head = "\n".join(record.splitlines()[:12])
    assert "failed after retries" in head and "1 questions whose agent call failed" in head, head
