"""The backend the model door builds for a `scripted/...` model name: it answers each request by
the rule registered for its task. The rules live beside the prompts they read and are loaded here
by module name (`RULE_MODULES`), so selecting the model by name is all a stage does, and no stage
imports a rule (none is a code dep of a real run)."""

from __future__ import annotations

import importlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients.llm.cache import canonical_json
from clients.llm.port import ChatRequest, RawReply
from clients.scripted.rules import RECORD_ENV, ScriptedReply, rule_for, schema_rule
from clients.tokens import count_tokens

RULE_MODULES = (
    "bench.scripted_rules",  # judge, equivalence: beside the judge's prompts
    "systems.scripted_rules",  # answer: beside the one-shot baselines' prompt
    "systems.graphrag.scripted_rules",  # extract, resolve, link, agent: beside GraphRAG's prompts
    "systems.peers.scripted_rules",  # mem0_extract, graphiti_*: beside the peers' adapters
)
"""The modules that register the test model's rules, each beside the prompts its rules read.
Imported by name (the model door must not import the layers above it; import-linter does not see
these imports, which is why they are listed here and nowhere else)."""


def load_rules() -> None:
    """Register every rule (once per process: a module registers when first imported)."""
    for module in RULE_MODULES:
        importlib.import_module(module)


# -- the backend clients/llm/client.py uses -------------------------------------------------------
@dataclass
class ScriptedBackend:
    model: str
    test_model: bool = True
    history: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        load_rules()

    def prepare(self) -> None:
        return None

    def reply(self, request: ChatRequest) -> ScriptedReply:
        rule = rule_for(request.task, self.model)
        if rule is None and request.schema is not None:
            rule = schema_rule
        if rule is None:
            raise ValueError(
                f"{self.model} has no rule for task {request.task!r} and the request has no "
                "schema; register one with clients.scripted.rules.register_rule"
                f"({request.task!r}, fn)"
            )
        return rule(request)

    async def send(
        self, request: ChatRequest, messages: list[dict[str, Any]], *, native_schema: bool
    ) -> RawReply:
        scripted = self.reply(request)
        text = scripted.text
        if scripted.value is not None:
            text = json.dumps(scripted.value, sort_keys=True)
        calls = [
            (f"call_{i}", name, json.dumps(args, sort_keys=True))
            for i, (name, args) in enumerate(scripted.tool_calls)
        ]
        entry = {
            "model": self.model,
            "task": request.task,
            "prompt_version": request.prompt_version,
            "messages": messages,
            "tools": [t.name for t in request.tools],
            "schema": request.schema.__name__ if request.schema is not None else None,
            "reply": {"text": text, "tool_calls": [[n, a] for _, n, a in calls]},
        }
        self._record(entry)
        prompt_text = "\n".join(str(m.get("content") or "") for m in messages)
        return RawReply(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            prompt_tokens=count_tokens(prompt_text),
            completion_tokens=count_tokens((text or "") + "".join(a for _, _, a in calls)),
        )

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.history.append(entry)
            target = os.environ.get(RECORD_ENV)
            if target:
                path = Path(target)
                path.parent.mkdir(parents=True, exist_ok=True)
                line = (canonical_json(entry) + "\n").encode("utf-8")
                # one O_APPEND write per line: lines from concurrent processes do not interleave
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)


def read_record(path: Path) -> list[dict[str, Any]]:
    """The requests a scripted model recorded (BEAM_SCRIPTED_RECORD), in order."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
