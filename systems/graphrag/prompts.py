"""The graphrag system's prompts, each a `Prompt` whose version is derived from its text
(schemas/prompt.py): extraction (one call per chunk), the two judgement calls after it (are two
entities one; does a newer statement supersede or contradict an older one) and the answer agent.
The user messages that carry the data (a chunk, numbered pairs, the question) are laid out beside
the calls that send them (extract.py, decide.py); the texts here are the instructions.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.memory import ENTITY_LABELS, LABEL_DOCS, STATEMENT_LABELS
from schemas.prompt import Prompt


def _labels_text(labels: Sequence[str]) -> str:
    return "\n".join(f"- {label}: {LABEL_DOCS[label]}" for label in labels)  # type: ignore[index]


EXTRACT = Prompt(
    name="graphrag-extract",
    text=f"""You build a memory of a long chat between a user and an assistant.
From the chat excerpt, extract what a later question about the user could need.

Entity labels:
{_labels_text(ENTITY_LABELS)}

Statement labels (each statement is one self-contained sentence):
{_labels_text(STATEMENT_LABELS)}

Rules:
- Give every entity and statement a short key (e1, e2, s1, ...). Statements list the keys of the
  entities they are `about`; an Instruction or Preference names its trigger `topic` (a Topic key).
- `message_ids` are the numbers of the `[message N · role]` headers a statement comes from.
- Resolve relative dates against the session date; put the date in `when` (YYYY-MM-DD if possible).
- A Measure has a numeric `value` and its `unit`.
- Prefer what the user says about themselves, their plans, numbers, dates, decisions, changes of
  mind and standing instructions. Skip generic advice.
Reply with JSON only, matching the schema.""",
)
"""Its labels and their meaning are read from schemas/memory.py, the one source the prompt, the
reply schema and validation share."""

RESOLVE = Prompt(
    name="graphrag-resolve",
    text="""You merge duplicate entries of a memory graph built from one chat.
For each numbered pair of entity names (with the same label), decide whether both names refer to
the same real thing in this chat. Be conservative: different people, places or tools that only
share a word are not the same. Reply with JSON only: {"decisions": [{"pair": 1, "same": true}, ...]}
with one decision per pair.""",
)

LINK = Prompt(
    name="graphrag-link",
    text="""You keep a memory of a chat up to date. Each numbered pair holds a NEWER and an
OLDER statement about the same thing, with the dates they were said. Decide for each pair:
- "supersedes": the newer statement updates or replaces the older one (a change of plan, a new
  value, a correction);
- "contradicts": the two disagree and the newer one does not clearly replace the older one;
- "none": they are compatible or about different things.
Reply with JSON only, one decision per pair:
{"decisions": [{"pair": 1, "relation": "none"}, ...]}""",
)

AGENT = Prompt(
    name="graphrag-agent",
    text="""You answer questions about a long past chat between a user and an assistant.
You cannot see the chat: it is stored in a memory graph that your tools search. Work like this:
1. Search the memory for the question's key terms (search_memory); follow up with
   statements_about, timeline, entity_neighbourhood or read_source for details and dates.
2. Prefer the newest information: a statement that is superseded is out of date.
3. Before answering, check standing_instructions: the user's instructions and preferences
   about how to answer must be followed.
4. Answer directly and concisely from what the tools returned, with the relevant dates and
   numbers. If the memory does not contain the answer, say that you don't know rather than guess.
Answer in plain text when you are done (no more tool calls).""",
)

PROMPTS = (EXTRACT, RESOLVE, LINK, AGENT)
