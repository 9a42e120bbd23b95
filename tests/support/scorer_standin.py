"""Stand-ins for the benchmark's two scorer source files, and a loopback raw-file host.

The stand-in texts are this project's own wording, but have the real files' Python shape: a
module-level `unified_llm_judge_base_prompt` string with the `<question>`, `<rubric_item>` and
`<llm_response>` slots, and an `llm_equivalence(first_paragraph, second_paragraph, llm)` whose
body builds a system dict, a user dict whose content is an f-string of the two snippets, and
`messages = [system_msg, user_msg]`. So the `ast` extractor is exercised as on the real files.
The real files are never copied into the repository.

`serve_files({"/<repo>/<commit>/<path>": bytes})` serves them like raw.githubusercontent.com.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = "example-owner/BEAM-standin"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PROMPTS_PATH = "src/prompts.py"
COMPUTE_METRICS_PATH = "src/evaluation/compute_metrics.py"

# The stand-in's texts, as the extractor must return them (tests compare against these).
ITEM_PROMPT = """
Stand-in grader. Decide how well the ANSWER meets one CHECK.

- QUESTION ASKED: <question>
- CHECK: <rubric_item>
- ANSWER: <llm_response>

Give 1.0 when the check is fully met, 0.5 when partly met, 0.0 when not met or off-topic.
Reply with JSON only: {"score": <1.0 | 0.5 | 0.0>, "reason": "<one sentence>"}
"""
ITEM_PROMPT_WITHOUT_QUESTION = ITEM_PROMPT.replace("- QUESTION ASKED: <question>\n", "")
EQUIVALENCE_SYSTEM = """
            Stand-in matcher: say YES when both snippets name one and the same happening,
            otherwise say NO. Nothing else.
        """
EQUIVALENCE_USER = """Snippet A: <first> \n
                       Snippet B: <second>
                    """


def prompts_py(*, question_slot: bool = True) -> str:
    """A stand-in `src/prompts.py`: other prompts around the judge prompt, one built by `+`."""
    body = ITEM_PROMPT if question_slot else ITEM_PROMPT_WITHOUT_QUESTION
    return (
        "# ======== stand-in prompts (not the benchmark's text) ========\n\n"
        'label_prompt_template = """\nName three labels for TOPIC {} and THEME {}.\n"""\n\n'
        "short_prompt = (\n"
        '    "Answer briefly. "\n'
        '    + "Use the context only."\n'
        ")\n\n"
        "# ######## judge prompts ########\n\n"
        f'unified_llm_judge_base_prompt = """{body}"""\n\n'
        'break_paragraph_prompt = """\nSplit <input_text> for <question> into facts.\n"""\n'
    )


def compute_metrics_py() -> str:
    """A stand-in `src/evaluation/compute_metrics.py` with `llm_equivalence` in the real shape."""
    return (
        "import json\n"
        "from typing import List, Tuple\n\n"
        "from scipy.stats import kendalltau\n\n"
        "from src.prompts import *\n\n\n"
        "def extract_facts(paragraph: str, question: str, model):\n"
        '    prompt = break_paragraph_prompt.replace("<question>", question)\n'
        '    return model.invoke(prompt).content.split("\\n")\n\n\n'
        "def llm_equivalence(first_paragraph: str,\n"
        "                    second_paragraph: str,\n"
        "                    llm) -> bool:\n\n"
        "    system_msg = {\n"
        '        "role": "system",\n'
        f'        "content": """{EQUIVALENCE_SYSTEM}"""\n'
        "    }\n"
        "    user_msg = {\n"
        '        "role": "user",\n'
        '        "content": f"""Snippet A: {first_paragraph} \\n\n'
        "                       Snippet B: {second_paragraph}\n"
        '                    """\n'
        "    }\n\n"
        "    messages = [system_msg, user_msg]\n"
        "    response = llm.invoke(messages).content.lower()\n\n"
        '    return "yes" in response\n\n\n'
        "def align_with_llm(reference: List[str], system: List[str],\n"
        "                   llm) -> Tuple[List[str], List[str]]:\n"
        "    used = set()\n"
        "    out = []\n"
        "    for s in system:\n"
        "        hit = next((i for i, r in enumerate(reference)\n"
        "                    if i not in used and llm_equivalence(r, s, llm)), None)\n"
        "        out.append(s if hit is None else reference[hit])\n"
        "        if hit is not None:\n"
        "            used.add(hit)\n"
        "    return reference, out\n"
    )


def standin_files(*, question_slot: bool = True) -> dict[str, bytes]:
    """Repository path -> bytes of the two stand-in files."""
    return {
        PROMPTS_PATH: prompts_py(question_slot=question_slot).encode("utf-8"),
        COMPUTE_METRICS_PATH: compute_metrics_py().encode("utf-8"),
    }


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_standin(root: Path, *, question_slot: bool = True) -> dict[str, Path]:
    """Write the stand-in files under `root` at their repository paths."""
    written: dict[str, Path] = {}
    for path, data in standin_files(question_slot=question_slot).items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written[path] = target
    return written


@dataclass
class RawHost:
    """What a test needs of the running server: its base URL and the paths it was asked for."""

    base_url: str
    requests: list[str] = field(default_factory=list)
    failures_left: int = 0
    failure_status: int = 503


def _handler(
    files: Mapping[str, bytes], host: RawHost, lock: threading.Lock
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                host.requests.append(self.path)
                fail = host.failures_left > 0
                if fail:
                    host.failures_left -= 1
            if fail:
                self._send(host.failure_status, b"try again later")
            elif self.path in files:
                self._send(200, files[self.path])
            else:
                self._send(404, b"404: Not Found")

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test asserts on `host.requests` instead."""

    return Handler


@contextmanager
def serve_files(
    files: Mapping[str, bytes], *, failures: int = 0, failure_status: int = 503
) -> Iterator[RawHost]:
    """Serve `files` (URL path -> body) on 127.0.0.1 at a free port until the block ends; the
    first `failures` requests get `failure_status`. The server is shut down on any exit."""
    host = RawHost(base_url="", failures_left=failures, failure_status=failure_status)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(files, host, threading.Lock()))
    server.daemon_threads = True
    host.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="raw-host", daemon=True
    )
    thread.start()
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def raw_layout(repo: str, commit: str, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """Repository files as raw.githubusercontent.com lays them out: `/<repo>/<commit>/<path>`."""
    return {f"/{repo}/{commit}/{path}": data for path, data in files.items()}


def standin_judge_pins() -> dict[str, object]:
    """The `judge` params that pin the stand-in files (merge into a copy of params.yaml)."""
    files = standin_files()
    return {
        "scorer_repo": REPO,
        "scorer_commit": COMMIT,
        "prompts": {"path": PROMPTS_PATH, "sha256": sha256_of(files[PROMPTS_PATH])},
        "compute_metrics": {
            "path": COMPUTE_METRICS_PATH,
            "sha256": sha256_of(files[COMPUTE_METRICS_PATH]),
        },
    }
