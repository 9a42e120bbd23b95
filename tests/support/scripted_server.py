"""The scripted test model `scripted/rules` served over HTTP, with planned faults.

Stage processes reach it through the real litellm path (model `openai/test-model`, `api_base` the
server's `/v1`, OPENAI_API_KEY set to anything) and get the replies `scripted/rules` gives
in-process: each OpenAI request body is turned back into the `ChatRequest` the stage built
(`request_from_body`: the task from the prompt's opening, tools and schema by name, the layer's
schema instruction and repair turn taken off) and answered by `clients.scripted.ScriptedBackend`'s
rule for its task, as text, JSON text or tool calls (ids `call_<i>`, as in-process).

Faults are planned per task (`FaultPlan`): the first `times` requests of the task, or of its
`request`-th distinct request, get the fault, then healthy replies; `times=None` never heals.
Kinds: rate_limit (429, Retry-After: 0), server_error (500), hang (no reply before the client's
timeout), malformed (a JSON reply cut off: unrepairable; only where the healthy reply is JSON),
bad_tool_args (a tool call whose arguments are not JSON; only where tools are offered), empty
(content ""), down (the server process exits at that request: connections are refused until
the test starts it again on the same port). One is not a fault of the model server but of the
model, as a prompt injection would make it: cypher_bomb (only where the agent's tools are
offered) is a well-formed call of its free Cypher tool with a read that runs past every timeout
(`CYPHER_BOMB`), the reply a hostile chat wants.

Every request is logged with its task, the key of the stage's request (`request_key`: the same
for retries and the repair turn), what it got (`ok` or the fault) and when it came and was
answered (epoch seconds), in memory and, in the server process, in a JSONL file that outlives it.
`latency` (`--latency`) holds each chat reply that long before it goes out, with no bound on how
many wait at once (a thread per connection): a model of fixed speed and unlimited parallelism,
for wall-time benchmarks (measure/scale.py). A test starts it with `ServerProcess` (its own
process, so it can die and come back); `python -m tests.support.scripted_server` prints
`port=<n>` and takes commands on stdin (one JSON line each: `{"faults": [plan, ...]}`), until
stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel

from bench.scorer_prompts import extract_judge_prompts, with_question_slot
from bench.scoring import JudgeVerdict
from clients.llm.cache import canonical_json
from clients.llm.port import ChatRequest, Message, Tool, ToolCall
from clients.llm.replies import schema_instruction
from clients.scripted.backend import ScriptedBackend
from schemas.judging import JudgePrompts
from systems import agent_loop, one_shot
from systems import prompts as baseline_prompts
from systems.graphrag import agent, decide, extract
from systems.graphrag import prompts as graphrag_prompts
from tests.support.openai_server import Action, LoopbackServer
from tests.support.scorer_standin import compute_metrics_py, prompts_py

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "hang",
    "malformed",
    "bad_tool_args",
    "empty",
    "down",
    "cypher_bomb",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
HANG_SECONDS = 60.0
CYPHER_BOMB = "RETURN reduce(s = 0, x IN range(1, 1000000000000) | s + x) AS total"
"""A read that passes every check of the agent's free query and that Neo4j 5.26 does not stop at
its timeout nor when terminated: only a restart of the server frees it."""
SERVED_VERSION = "served"
BAD_TOOL_ARGUMENTS = '{"query": "missing brace"'

SCHEMAS: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (extract.ExtractionReply, decide.ResolveReply, decide.LinkReply, JudgeVerdict)
}
"""The reply schemas stages ask for, by class name (as `response_format` names them)."""
TOOLS: dict[str, Tool] = {t.name: t for t in agent.TOOLS}


class UnknownPrompt(ValueError):
    """A request whose prompt the inference table does not know."""


# -- which task a request is for ------------------------------------------------------------------
@dataclass(frozen=True)
class PromptTask:
    role: str
    """Role of the request's first message."""
    opening: str
    """How that message starts (the fixed text before any filled-in slot)."""
    task: str
    schema: type[BaseModel] | None = None
    """The schema the stage validates replies against when the prompt itself asks for its JSON
    (no schema instruction or response_format in the body to tell it)."""


def _opening(template: str) -> str:
    """A template's text before its first `<slot>`, stripped."""
    cut = min(
        (template.find(s) for s in ("<question>", "<rubric_item>", "<first>") if s in template),
        default=len(template),
    )
    return template[:cut].strip()


def prompt_tasks(judge: JudgePrompts | None = None) -> tuple[PromptTask, ...]:
    """The one table from prompts to tasks: the memory system's system prompts and the judge's
    (the benchmark's scorer texts; by default the tests' stand-in files)."""
    judge = judge or extract_judge_prompts(prompts_py(), compute_metrics_py())
    return (
        PromptTask("system", graphrag_prompts.EXTRACT.text, extract.TASK),
        PromptTask("system", graphrag_prompts.RESOLVE.text, decide.RESOLVE_TASK),
        PromptTask("system", graphrag_prompts.LINK.text, decide.LINK_TASK),
        PromptTask("system", graphrag_prompts.AGENT.text, agent_loop.TASK),
        PromptTask("system", baseline_prompts.SEARCH_AGENT.text, agent_loop.TASK),
        PromptTask("system", baseline_prompts.system_prompt("").split("\n")[0], one_shot.TASK),
        PromptTask("system", _opening(judge.equivalence_system), "equivalence"),
        PromptTask("user", _opening(with_question_slot(judge.item_prompt)), "judge", JudgeVerdict),
    )


@functools.cache
def peer_prompt_tasks() -> tuple[PromptTask, ...]:
    """The peers' prompts (Mem0's extraction), looked up only when no prompt of ours matched:
    importing Mem0 takes seconds, and most servers never see it."""
    from systems.peers import mem0

    return (PromptTask("system", mem0.ADDITIVE_EXTRACTION_PROMPT.strip(), mem0.EXTRACT_TASK),)


def infer_task(messages: Sequence[Mapping[str, Any]], table: Sequence[PromptTask]) -> PromptTask:
    first = messages[0] if messages else {}
    role, text = first.get("role"), str(first.get("content") or "").strip()
    for tasks in (lambda: table, peer_prompt_tasks):  # the peers' only when ours do not match
        for entry in tasks():
            if entry.role == role and entry.opening and text.startswith(entry.opening):
                return entry
    known = ", ".join(sorted({e.task for e in table}))
    raise UnknownPrompt(
        f"scripted server: no task for a request whose first message ({role}) starts "
        f"{text[:80]!r}; known tasks: {known}. Add its prompt to prompt_tasks()."
    )


# -- the stage's request, back from the OpenAI body -----------------------------------------------
def _message(raw: Mapping[str, Any]) -> Message:
    calls = tuple(
        ToolCall(
            id=str(c.get("id") or f"call_{i}"),
            name=str(c["function"]["name"]),
            raw_arguments=str(c["function"].get("arguments") or ""),
        )
        for i, c in enumerate(raw.get("tool_calls") or [])
    )
    content = raw.get("content")
    if isinstance(content, list):  # content parts: keep the text
        content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return Message(
        role=raw["role"],
        content=content,
        tool_calls=calls,
        tool_call_id=raw.get("tool_call_id"),
        name=raw.get("name") if raw["role"] == "tool" else None,
    )


@functools.cache
def peer_schemas() -> dict[str, type[BaseModel]]:
    """Graphiti's reply schemas by name (its task is `graphiti_<name>`: no prompt table needed)."""
    from systems.peers import graphiti  # imported here: Graphiti's import is slow

    return {m.__name__: m for m in graphiti.REPLY_SCHEMAS}


def _schema_of(body: Mapping[str, Any], messages: list[dict[str, Any]]) -> type[BaseModel] | None:
    fmt = body.get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name") if isinstance(fmt, dict) else None
    if name:
        if name in SCHEMAS:  # ours first: the peers' lookup imports Graphiti
            return SCHEMAS[name]
        if name not in peer_schemas():
            raise UnknownPrompt(f"scripted server: unknown response_format schema {name!r}")
        return peer_schemas()[name]
    texts = [str(m.get("content") or "") for m in messages]
    for schema in SCHEMAS.values():
        if any(t.endswith(schema_instruction(schema)) for t in texts):
            return schema
    return None


@dataclass(frozen=True)
class ServedRequest:
    """What the server makes of one HTTP request."""

    request: ChatRequest
    key: str
    """The same for every attempt at one request of the stage (retries, the repair turn)."""
    repair: bool
    """Whether this was the layer's repair turn (its unusable reply and the problem appended)."""


def request_key(
    task: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[str], schema: str | None
) -> str:
    blob = canonical_json(
        {"task": task, "messages": list(messages), "tools": list(tools), "schema": schema}
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def request_from_body(body: Mapping[str, Any], table: Sequence[PromptTask]) -> ServedRequest:
    """The ChatRequest a stage built, from the OpenAI request body litellm sent."""
    messages = [dict(m) for m in body.get("messages") or []]
    schema = _schema_of(body, messages)
    repair = False
    if schema is not None:
        instruction = schema_instruction(schema)
        if (
            len(messages) >= 2
            and messages[-1].get("role") == "user"
            and str(messages[-1].get("content") or "").endswith(instruction)
            and messages[-2].get("role") == "assistant"
        ):
            messages, repair = messages[:-2], True
        if (
            messages
            and messages[-1].get("role") == "system"
            and messages[-1].get("content") == (instruction)
        ):
            messages = messages[:-1]
    if schema is not None and schema.__name__ not in SCHEMAS and schema.__name__ in peer_schemas():
        from systems.peers import graphiti

        entry = PromptTask("system", "", graphiti.task_of(schema), schema)
    else:
        entry = infer_task(messages, table)
    task, schema = entry.task, schema or entry.schema
    names = [str(t["function"]["name"]) for t in body.get("tools") or []]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise UnknownPrompt(f"scripted server: unknown tool(s) {unknown}")
    request = ChatRequest(
        messages=tuple(_message(m) for m in messages),
        task=task,
        prompt_version=SERVED_VERSION,
        tools=tuple(TOOLS[n] for n in names),
        schema=schema,
    )
    key = request_key(task, messages, names, schema.__name__ if schema else None)
    return ServedRequest(request, key, repair)


# -- faults -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FaultPlan:
    """Faults for one task: its first `times` requests (every one with None), or only those of
    its `request`-th distinct request (0-based, in order of arrival), get `kind`."""

    task: str
    kind: FaultKind
    times: int | None = 1
    request: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {FAULT_KINDS}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultPlan:
        return cls(**data)


@dataclass(frozen=True)
class LogEntry:
    task: str
    key: str
    outcome: str
    """`ok`, a fault kind, or `unknown` (the prompt was not recognized)."""
    repair: bool = False
    started: float = 0.0
    """When the request came (epoch seconds)."""
    ended: float = 0.0
    """When its reply was ready to go out, after the latency (epoch seconds)."""


def _healthy(request: ChatRequest) -> tuple[Action, bool]:
    """The scripted model's reply as an Action, and whether it is JSON text."""
    reply = ScriptedBackend(model="scripted/rules").reply(request)
    if reply.tool_calls:
        calls = [
            (f"call_{i}", name, json.dumps(args, sort_keys=True))
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
        return Action.tool_calls(*calls), False
    if reply.value is not None:
        return Action.text(json.dumps(reply.value, sort_keys=True)), True
    text = reply.text or ""
    return Action.text(text), text.lstrip().startswith(("{", "["))


@dataclass
class ScriptedResponder:
    """A LoopbackServer responder (`server.set_responder(responder)`): scripted replies and
    planned faults, with a log of every request."""

    table: tuple[PromptTask, ...] = field(default_factory=prompt_tasks)
    log_path: Path | None = None
    hang_seconds: float = HANG_SECONDS
    latency: float = 0.0
    """Seconds each chat reply waits before it goes out (a fault's too)."""
    on_down: Callable[[], None] | None = None
    """What `down` does; the server process exits. In-process there is nothing to stop."""
    _plans: list[FaultPlan] = field(default_factory=list)
    _used: Counter[int] = field(default_factory=Counter)
    _distinct: dict[str, list[str]] = field(default_factory=dict)
    _log: list[LogEntry] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set_faults(self, *plans: FaultPlan) -> None:
        """Replace the plan (none: healthy from now on); counts and the order of distinct
        requests (`FaultPlan.request`) start again."""
        with self._lock:
            self._plans = list(plans)
            self._used.clear()
            self._distinct.clear()

    @property
    def log(self) -> list[LogEntry]:
        with self._lock:
            return list(self._log)

    def counts(self) -> Counter[str]:
        """HTTP requests per task so far."""
        return Counter(e.task for e in self.log)

    def _fault_for(self, served: ServedRequest, is_json: bool) -> FaultKind | None:
        task = served.request.task
        with self._lock:
            keys = self._distinct.setdefault(task, [])
            if served.key not in keys:
                keys.append(served.key)
            index = keys.index(served.key)
            for number, plan in enumerate(self._plans):
                if plan.task != task or (plan.request is not None and plan.request != index):
                    continue
                if plan.times is not None and self._used[number] >= plan.times:
                    continue
                if plan.kind == "malformed" and not is_json:
                    continue
                if plan.kind in ("bad_tool_args", "cypher_bomb") and not served.request.tools:
                    continue
                self._used[number] += 1
                return plan.kind
        return None

    def embedded(self, body: dict[str, Any]) -> None:
        """An embedding request the server answered (task `embedding`, keyed by its texts)."""
        key = hashlib.sha256(canonical_json(body.get("input")).encode("utf-8")).hexdigest()[:16]
        now = time.time()
        self._record(LogEntry(task="embedding", key=key, outcome="ok", started=now, ended=now))

    def _record(self, entry: LogEntry) -> None:
        with self._lock:
            self._log.append(entry)
            if self.log_path is not None:
                line = (json.dumps(asdict(entry), sort_keys=True) + "\n").encode("utf-8")
                fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)

    def __call__(self, body: dict[str, Any]) -> Action:
        started = time.time()
        try:
            served = request_from_body(body, self.table)
        except (UnknownPrompt, KeyError, ValueError) as exc:
            now = time.time()
            self._record(LogEntry(task="?", key="?", outcome="unknown", started=started, ended=now))
            print(str(exc), file=sys.stderr, flush=True)
            return Action.status(400, str(exc))
        healthy, is_json = _healthy(served.request)
        kind = self._fault_for(served, is_json)
        if self.latency:
            time.sleep(max(0.0, started + self.latency - time.time()))
        entry = LogEntry(
            served.request.task,
            served.key,
            kind or "ok",
            repair=served.repair,
            started=started,
            ended=time.time(),
        )
        self._record(entry)
        if kind is None:
            return healthy
        return self._fault(kind, served.request, healthy)

    def _fault(self, kind: FaultKind, request: ChatRequest, healthy: Action) -> Action:
        if kind == "rate_limit":
            return Action.rate_limit(0)
        if kind == "server_error":
            return Action.server_error()
        if kind == "hang":
            return Action.hang(self.hang_seconds)
        if kind == "malformed":  # the healthy JSON cut in half: cut off, so never repaired
            return Action("malformed", content=healthy.content[: max(1, len(healthy.content) // 2)])
        if kind == "bad_tool_args":
            name = healthy.calls[0][1] if healthy.calls else request.tools[0].name
            return Action("bad_tool_args", tool_name=name, arguments=BAD_TOOL_ARGUMENTS)
        if kind == "empty":
            return Action.empty()
        if kind == "cypher_bomb":
            arguments = json.dumps({"query": CYPHER_BOMB})
            return Action.tool_calls(("call_0", "read_only_cypher", arguments))
        if self.on_down is None:
            raise RuntimeError("the down fault needs the server process (ServerProcess)")
        self.on_down()
        raise AssertionError("on_down returned")


# -- the server in its own process ----------------------------------------------------------------
def read_log(path: Path) -> list[LogEntry]:
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [LogEntry(**json.loads(line)) for line in lines if line.strip()]


class ServerProcess:
    """The scripted server as a child process: `kill()` it (or let a `down` fault end it) and
    `start()` it again on the same port. Its log file keeps every request across restarts."""

    def __init__(
        self,
        log_path: Path,
        *,
        cwd: Path | None = None,
        hang_seconds: float = HANG_SECONDS,
        env: Mapping[str, str] | None = None,
        latency: float = 0.0,
    ) -> None:
        self.log_path = log_path
        self.cwd = cwd
        self.hang_seconds = hang_seconds
        self.latency = latency
        self.env = dict(env) if env is not None else None
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def api_base(self) -> str:
        if not self.port:
            raise RuntimeError("the scripted server has not been started")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ServerProcess:
        if self.running:
            raise RuntimeError("the scripted server is already running")
        command = [
            sys.executable,
            "-m",
            "tests.support.scripted_server",
            "--port",
            str(self.port),
            "--log",
            str(self.log_path),
            "--hang-seconds",
            str(self.hang_seconds),
            "--latency",
            str(self.latency),
        ]
        self._process = subprocess.Popen(
            command,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("port="):
            self.kill()
            raise RuntimeError(f"the scripted server did not start (said {line!r})")
        self.port = int(line.removeprefix("port=").strip())
        return self

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _command(self, payload: Mapping[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise RuntimeError("the scripted server is not running")
        process.stdin.write(json.dumps(payload) + "\n")
        process.stdin.flush()
        answer = process.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"the scripted server refused {payload}: {answer!r}")

    def set_faults(self, *plans: FaultPlan) -> None:
        """Replace the fault plan (no plans: healthy)."""
        self._command({"faults": [p.to_json() for p in plans]})

    def requests(self) -> list[LogEntry]:
        return read_log(self.log_path)

    def wait_down(self, timeout: float = 30.0) -> int:
        """Wait for the process to end (after a `down` fault); its exit code."""
        if self._process is None:
            raise RuntimeError("the scripted server was never started")
        return self._process.wait(timeout=timeout)

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def restart(self) -> ServerProcess:
        """Healthy again, on the same port (after `kill()` or a `down` fault)."""
        self.kill()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--log", type=Path, default=None, help="JSONL file of every request")
    parser.add_argument("--hang-seconds", type=float, default=HANG_SECONDS)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args(argv)

    def down() -> None:
        os._exit(0)  # mid-request: the client sees its connection dropped, then refused

    responder = ScriptedResponder(
        log_path=args.log, hang_seconds=args.hang_seconds, latency=args.latency, on_down=down
    )
    with LoopbackServer(port=args.port) as server:
        server.set_responder(responder)
        server.set_embedding_observer(responder.embedded)
        print(f"port={server.port}", flush=True)
        for line in sys.stdin:  # serve until the parent closes our stdin (or dies)
            try:
                command = json.loads(line)
                responder.set_faults(*(FaultPlan.from_json(p) for p in command["faults"]))
            except (ValueError, KeyError, TypeError) as exc:
                print(f"error: {exc}", flush=True)
                continue
            print("ok", flush=True)


if __name__ == "__main__":
    main()
