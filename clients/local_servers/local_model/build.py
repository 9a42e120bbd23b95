"""The llama-server build: CMake on the vendored llama.cpp of the pinned sdist, cached per CPU."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from clients.child_servers import spawn_child, tail
from clients.download import sha256_of
from clients.local_servers.cache import cache_lock, cache_root
from clients.local_servers.download import fetch_pinned
from clients.local_servers.local_model.cache import (
    BUILD_RECORD,
    cpu_key,
    installed_runtime,
    runtime_dir,
)
from clients.local_servers.local_model.pins import RUNTIME, RuntimePin
from clients.local_servers.local_model.weights import BUILD_COMMAND
from clients.local_servers.process import server_environment
from schemas.errors import IntegrityError, ServiceError

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

CONFIGURE_TIMEOUT_SECONDS = 300.0
BUILD_TIMEOUT_SECONDS = 3600.0
LOCK_TIMEOUT_SECONDS = BUILD_TIMEOUT_SECONDS + 600.0
VERSION_TIMEOUT_SECONDS = 30.0
API_KEY_ENV = "LLAMA_API_KEY"
"""llama-server's variable for --api-key (common/arg.cpp); /health stays open without it."""


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
            f"`{BUILD_COMMAND}` again"
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
            env=llama_environment(binary.parent, os.environ),
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
    with cache_lock(f"llama-server-{pin.version}", LOCK_TIMEOUT_SECONDS):
        ready = installed_runtime(pin)
        if ready is not None:
            return ready
        return _build_runtime(pin)


def _build_runtime(pin: RuntimePin) -> Path:
    cmake, ninja, cxx = _build_tools()
    final = runtime_dir(pin)
    final.parent.mkdir(parents=True, exist_ok=True)
    sdist = fetch_pinned(
        pin.package, pin.filename, pin.sha256, cache_root() / "downloads", BUILD_COMMAND
    )
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


def llama_environment(
    home: Path, environ: Mapping[str, str], api_key: str | None = None
) -> dict[str, str]:
    """llama-server's whole environment: the one every local server gets (clients/local_servers/
    process.py `server_environment`), and LLAMA_API_KEY when `api_key` is given (the server then
    refuses requests without it). No LLAMA_ARG_* / LLAMA_CACHE / HF_* that would change flags."""
    env = server_environment(home, environ)
    if api_key is not None:
        env[API_KEY_ENV] = api_key
    return env
