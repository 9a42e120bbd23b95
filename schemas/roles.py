"""The model roles, named once: what each model call is for, the key its calls and tokens are
counted under (clients/llm/accounting.py), estimated under (schemas/estimate.py) and configured
under (`models.<role>`), and the key of its cost in the report, the comparison and the viewer.

The build's roles are called by the ingest stage, so their cost keys carry its name
(`ingest_extraction`); the others are their own name (`embedding`, `agent`, `judge`): the
embedder serves both the build and the questions, and its key counts both.
"""

from __future__ import annotations

from typing import Literal, get_args

Role = Literal["extraction", "resolution", "embedding", "agent", "judge"]
ROLES: tuple[Role, ...] = get_args(Role)
"""Every role, in pipeline order. `embedding` turns texts into vectors (clients/llm/embeddings.py)
for the systems that retrieve by meaning, in the build (chunks, statements, entity names) and at
answer time (questions); every other role is a chat model."""
CHAT_ROLES: tuple[Role, ...] = tuple(role for role in ROLES if role != "embedding")
"""The roles served by a chat model (clients/llm/client.py's LlmClient)."""
INGEST_ROLES: tuple[Role, ...] = ("extraction", "resolution")
"""The roles of the memory's build (the ingest stage), 0 for a system without them."""


def cost_key(role: Role) -> str:
    """The role's key in the report's cost tables and in the ingest stage's wall-time seconds."""
    return f"ingest_{role}" if role in INGEST_ROLES else role


COST_KEYS: tuple[str, ...] = tuple(cost_key(role) for role in ROLES)
"""The cost keys in pipeline order (the report adds their `total`)."""
