"""The test model's rule for the one-shot baselines' prompt (task `answer`, systems/one_shot.py),
beside the code that writes it: a change to that prompt and to its rule travel together. The
scripted model loads this module by name (clients/scripted/backend.py `RULE_MODULES`); no stage
imports it, so it is no code dep of a real run. A run with it measures nothing.
"""

from __future__ import annotations

import re

from clients.llm.port import ChatRequest
from clients.scripted.rules import (
    ScriptedReply,
    last_user_text,
    overlap,
    register_rule,
    split_sentences,
)

_CHAT = re.compile(r"<chat>\n?(.*)\n?</chat>", re.DOTALL)
_CONTEXT_NOISE = re.compile(r"^(\[message [^\]]*\]|## Session .*)$")


def answer_rule(request: ChatRequest) -> ScriptedReply:
    """The one-shot baselines (task `answer`): the chat (or part of it) between `<chat>` tags,
    then `Question: ...`. Answers with the three sentences of the chat that best overlap the
    question (quoted), or that it does not know when none shares a content word with it (the
    question alone, or a context without the answer)."""
    prompt = last_user_text(request)
    found = _CHAT.search(prompt)
    context = found.group(1) if found else ""
    question = prompt[found.end() :] if found else prompt
    question = question.strip().removeprefix("Question:").strip()
    lines = [line for line in context.splitlines() if not _CONTEXT_NOISE.match(line.strip())]
    sentences = [s.strip() for line in lines for s in split_sentences(line)]
    sentences = [s for s in dict.fromkeys(sentences) if s]
    scored = [(overlap(question, s), i, s) for i, s in enumerate(sentences)]
    best = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1]))[:3]
    if not best:
        return ScriptedReply(text="I don't know: the chat I can see says nothing about this.")
    return ScriptedReply(text="From the chat:\n" + "\n".join(s for _, _, s in best))


register_rule("answer", answer_rule)
