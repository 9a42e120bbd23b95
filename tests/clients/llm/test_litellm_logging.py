"""litellm's own logging stays quiet when a stage calls models from several threads at once (as
the answer stage does at `llm.concurrency` 2): no "LoggingWorker" warning or traceback on stderr.
Run in a fresh process, so litellm's process-wide logging worker starts as in a stage."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT as ROOT

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, sys, tempfile, threading
    from pathlib import Path
    from clients.llm.accounting import Accounting
    from clients.llm.client import LlmClient
    from clients.llm.port import ChatRequest, Message
    from schemas.params import LlmParams, ModelRef
    from tests.support.openai_server import LoopbackServer

    os.environ["BEAM_LOOPBACK_KEY"] = "sk-loopback-test"
    with LoopbackServer() as server, tempfile.TemporaryDirectory() as work:
        params = LlmParams(
            timeout_seconds=10, max_attempts=1, concurrency=2, seed=7, cache=False,
            cache_dir=str(Path(work) / "cache"),
        )
        ref = ModelRef.model_validate({"model": "openai/test-model", "api_base": server.api_base})
        client = LlmClient("agent", ref, params, accounting=Accounting())
        failed = []

        def question(worker):
            for turn in range(15):
                text = f"question {worker} turn {turn}"
                request = ChatRequest((Message.user(text),), task="agent", prompt_version="t")
                if not client.complete(request).ok:
                    failed.append(text)

        threads = [threading.Thread(target=question, args=(w,)) for w in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failed, failed
        assert len(server.log) == 30, len(server.log)
    print("calls done")
    """
)


def test_concurrent_calls_print_no_litellm_logging_worker_noise() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "calls done" in done.stdout
    assert "LoggingWorker" not in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
