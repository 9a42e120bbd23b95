"""The answer prompts of the in-tree baselines (full_context, rag, no_memory, oracle) and of the
answer regimes (systems/regimes.py), each a `Prompt` whose version is derived from its text
(schemas/prompt.py). The one-shot prompts share their rules (`system_prompt`) and differ only in
what they say the context holds, so the baselines' scores differ by their memory alone; the peers
(systems/peers/prompts.py) use the same rules. graphrag's prompts are systems/graphrag/prompts.py.
"""

from __future__ import annotations

from schemas.params import Retriever
from schemas.prompt import Prompt

_RULES = """Answer directly and concisely, with the relevant dates and numbers. Where the chat
updates or contradicts an earlier statement, the newest one holds. Follow the instructions and
preferences the user gave in the chat about how to answer. If the answer is not in what you see,
say that you don't know rather than guess."""


def system_prompt(what_you_see: str) -> str:
    """The instructions every one-shot baseline shares, after what its context holds."""
    return (
        "You answer questions about a long past chat between a user and an assistant.\n"
        f"{what_you_see}\n{_RULES}"
    )


FULL_CONTEXT = Prompt(
    name="full-context",
    text=system_prompt(
        "Below is the chat, session by session with each session's date (where it is too long "
        "for your context, only its newest part); each message is headed by its id and role."
    ),
)

NO_MEMORY = Prompt(
    name="no-memory",
    text=system_prompt("You cannot see the chat: you have no memory of it at all."),
)

ORACLE = Prompt(
    name="oracle",
    text=system_prompt(
        "Below are the messages of the chat that bear on the question (none: the chat says "
        "nothing about it), in chat order, each under its session's date; each message is headed "
        "by its id and role."
    ),
)

_SEARCH_NOUN: dict[Retriever, str] = {
    "bm25": "a keyword search",
    "dense": "a search by meaning",
    "hybrid": "a search by keywords and meaning",
}
RAG: dict[Retriever, Prompt] = {
    retriever: Prompt(
        name=f"rag-{retriever}",
        text=system_prompt(
            f"Below are the excerpts of the chat that {noun} found for the question, in chat "
            "order, each under its session's date; each message is headed by its id and role."
        ),
    )
    for retriever, noun in _SEARCH_NOUN.items()
}
"""One prompt per retriever, naming how the excerpts were found."""

SEARCH_ONE_SHOT = Prompt(
    name="search-one-shot",
    text=system_prompt(
        "Below is what a search of the chat's memory found for the question (excerpts, facts or "
        "memories, with their dates and message ids)."
    ),
)
"""The one_shot regime's: one call with what the memory's own search found."""

SEARCH_AGENT = Prompt(
    name="search-agent",
    text="""You answer questions about a long past chat between a user and an assistant.
You cannot see the chat: it is stored in a memory that your one tool, search_memory, searches.
1. Search the memory for the question's key terms; search again with other words for details,
   dates and the user's instructions or preferences about the topic.
2. Prefer the newest information: where the chat updates an earlier statement, the newest holds.
3. Follow the instructions and preferences the user gave in the chat about how to answer.
4. Answer directly and concisely from what the searches returned, with the relevant dates and
   numbers. If the memory does not contain the answer, say that you don't know rather than guess.
Answer in plain text when you are done (no more tool calls).""",
)
"""The agent regime's: the shared agent loop with the memory's own search as its one tool."""

REPLAY = Prompt(
    name="replay",
    text=system_prompt(
        "You see what a memory system retrieved from the chat for this question, not the chat "
        "itself."
    ),
)

PROMPTS = (
    FULL_CONTEXT,
    NO_MEMORY,
    ORACLE,
    *RAG.values(),
    SEARCH_ONE_SHOT,
    SEARCH_AGENT,
    REPLAY,
)
