"""The port the memory systems code against: GraphStore and the records it returns.

Imports no driver, so a system (and its unit tests, with a fake store) needs no Neo4j.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from schemas.base import Record
from schemas.errors import BeamError
from schemas.memory import GraphBatch


class QueryFailed(BeamError):
    """The server refused or failed a query (syntax, type, timeout): the agent can read why."""


class WriteReceipt(Record):
    nodes: int
    relationships: int
    missing_endpoints: int
    """Relationships not written because an endpoint is not in the graph."""


class GraphCounts(Record):
    """Nodes per label and relationships per type (every label and type present)."""

    nodes: dict[str, int]
    relationships: dict[str, int]

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes.values())

    @property
    def total_relationships(self) -> int:
        return sum(self.relationships.values())


class Rows(list[dict[str, Any]]):
    """Rows of a read (plain JSON-able values); `truncated` is True when the row limit cut it."""

    truncated: bool = False


class GraphStore(Protocol):
    """The port the memory system codes against (a fake can stand in for it in unit tests)."""

    def write(self, batch: GraphBatch) -> WriteReceipt: ...

    def read(self, query: str, params: Mapping[str, object] | None = None) -> Rows: ...

    def nearest(self, query: str, vector: Sequence[float], limit: int) -> Rows:
        """The project's own vector search (one of `clients.cypher.NEAREST_QUERIES`, the queries
        project code trusted)."""
        ...
