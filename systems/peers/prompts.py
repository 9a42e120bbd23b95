"""The peers' prompts that are this project's, each a `Prompt` whose version is derived from its
text (schemas/prompt.py): the answer instructions (the one-shot baselines' rules,
systems/prompts.py, after what each peer's context holds) and Zep's context template as
graphiti's answer shows its search. The prompts a peer builds its memory with are its own
package's, wrapped where its adapter imports them (only the adapter may): Mem0's extraction
prompt (mem0.py `EXTRACT`); Graphiti's build prompts are code in graphiti_core/prompts/, so its
build calls carry the installed package's version (graphiti.py `BUILD_VERSION`).
"""

from __future__ import annotations

from schemas.prompt import Prompt
from systems.prompts import system_prompt

MEM0_ANSWER = Prompt(
    name="mem0",
    text=system_prompt(
        "Below are the memories a memory system (Mem0) kept of the chat that a search by meaning "
        "found for the question, best match first, each after the date of the session it came "
        "from."
    ),
)

GRAPHITI_ANSWER = Prompt(
    name="graphiti",
    text=system_prompt(
        "Below are the facts and entities a memory system (Graphiti) kept of the chat that a "
        "search by keywords and meaning found for the question, best match first: each fact with "
        "the time of the event it refers to where known, each entity with its summary."
    ),
)

GRAPHITI_CONTEXT = Prompt(
    name="graphiti-context",
    text="""FACTS and ENTITIES represent relevant context to the current conversation.

# These are the most relevant facts for the conversation along with the datetime of the event that the fact refers to.
# If a fact mentions something happening a week ago, then the datetime will be the date time of last week and not the datetime
# of when the fact was stated.
# Timestamps in memories represent the actual time the event occurred, not the time the event was mentioned in a message.

<FACTS>
{facts}
</FACTS>

# These are the most relevant entities
# ENTITY_NAME: entity summary
<ENTITIES>
{entities}
</ENTITIES>""",  # noqa: E501 (their text, line for line)
)
"""Zep's LoCoMo benchmark's context (`benchmarks/locomo/prompts.py` at 7de18df), word for word
less its leading and trailing blank line: a template (`{facts}`, `{entities}`) that fills the
answer's user message, so its text reaches the call cache's key through the messages; the
answer request carries `GRAPHITI_ANSWER`'s version."""

PROMPTS = (MEM0_ANSWER, GRAPHITI_ANSWER, GRAPHITI_CONTEXT)
