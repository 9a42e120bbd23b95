"""The agent's free query stays a read: a lexical guard and the check of Neo4j's own plan.

The agent's free query (the read_only_cypher tool) passes three independent checks, so that no
single mistake lets it write, administer the server or reach outside the graph:
1. `check_read_only` (pure, here): a cheap lexical guard that reads the query the way Neo4j
   5.26's lexer does (see `_REFUSED_CATEGORIES` and `_UNICODE_ESCAPE` for what was verified).
2. `check_plan` (pure, here): the store asks the server for the plan (`EXPLAIN`,
   clients/graph/store.py) and refuses unless Neo4j itself calls the query read-only and its
   plan holds no LOAD CSV, no procedure outside `READ_PROCEDURES`, no SHOW / TERMINATE /
   administration or transaction-batching step.
3. The server (clients/graph/conf.py, `HARDENING_CONF`): file and web URLs of LOAD CSV
   refused, no SHOW SETTINGS, a minimal process environment; the query runs in a READ session
   with a timeout.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from schemas.errors import BeamError


class QueryRejected(BeamError):
    """A query on the agent's read-only path that could write, administer or escape its graph."""


# The clauses of Neo4j 5.26's grammars (Cypher5Parser and Cypher25Parser of the 5.26.30 jars,
# `*ClauseContext`) are CALL, CREATE, DELETE (DETACH / NODETACH), FINISH, FOREACH, INSERT (GQL's
# CREATE), LOAD CSV, MATCH, MERGE, ORDER BY / SKIP / LIMIT, REMOVE, RETURN, SET, UNWIND, USE,
# WITH, WHERE, YIELD, plus SET AUTH and WAIT of administration commands. Every one that writes,
# reads outside the graph or administers has its keyword here; CYPHER (query options, a
# language version) is refused too, as no read of the memory graph needs another parser or
# runtime.
WRITE_KEYWORDS = frozenset(
    {
        "CREATE",
        "INSERT",
        "MERGE",
        "DELETE",
        "DETACH",
        "NODETACH",
        "SET",
        "REMOVE",
        "DROP",
        "FOREACH",
        "LOAD",
        "ALTER",
        "RENAME",
        "GRANT",
        "DENY",
        "REVOKE",
        "START",
        "STOP",
        "TERMINATE",
        "USE",
        "SHOW",
        "ENABLE",
        "DEALLOCATE",
        "REALLOCATE",
        "WAIT",
        "CYPHER",
    }
)
READ_PROCEDURE_NAMES = (
    "db.index.fulltext.queryNodes",
    "db.index.fulltext.queryRelationships",
    "db.labels",
    "db.relationshipTypes",
    "db.propertyKeys",
    "db.schema.visualization",
    "db.schema.nodeTypeProperties",
    "db.schema.relTypeProperties",
)
READ_PROCEDURES = frozenset(name.lower() for name in READ_PROCEDURE_NAMES)
# `dbms.security.procedures.allowlist` of the server: the agent's read procedures and what the
# project's own Cypher calls. Neo4j 5.26 Community applies it to plugin procedures only; built-in
# ones such as dbms.listConfig stay callable (verified), which is why `check_plan` exists.
SERVER_PROCEDURE_ALLOWLIST = (
    *READ_PROCEDURE_NAMES,
    "db.awaitIndexes",
    "db.index.vector.queryNodes",
    "db.create.setNodeVectorProperty",
)
# Not the agent's: db.index.vector.queryNodes takes its `k` from the query, and on the real server
# k = 10^8 ran the JVM out of memory inside the call (graphrag.retrieval hybrid builds the indexes).
# The project's own vector searches run through GraphStore.nearest, with our query and a bounded k.
_STRING_OR_COMMENT = re.compile(
    r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`|//[^\n]*|/\*.*?\*/""", re.DOTALL
)
_UNTERMINATED = re.compile(r"""['"`]|/\*""")
_WORD = re.compile(r"(?<![\w.$:])([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*:(?!:))")
_CALL = re.compile(r"\bCALL\b\s*([^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)*)", re.I)
_IN_TRANSACTIONS = re.compile(r"\bIN\s+(?:\d+\s+)?(?:CONCURRENT\s+)?TRANSACTIONS\b", re.I)
_APOC = re.compile(r"\bapoc\s*\.", re.I)
# Neo4j 5.26.30 decodes `\uXXXX` anywhere in the query text before it reads strings, names and
# comments (verified: `// \u000a RETURN 1` returns a row, `'\u0027'` closes the string,
# `` `\u0041` `` names the column A). The guard refuses them instead of decoding them.
_UNICODE_ESCAPE = re.compile(r"\\u", re.I)
# What Neo4j 5.26.30 does with characters a reader does not see (verified with EXPLAIN and runs):
# \r ends a `//` comment like \n; \x0b, \x0c, \x1c-\x1f, \u2028 and \u2029 are white space but do
# not end a comment; \x00, \x85, \u200b and \ufeff are kept inside identifiers. Only \n and \t
# are allowed, so a comment ends exactly where the guard ends it.
_ALLOWED_CONTROLS = frozenset("\n\t")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
MAX_QUERY_CHARS = 20_000


def _refused_char(query: str) -> str | None:
    for char in query:
        if char not in _ALLOWED_CONTROLS and unicodedata.category(char) in _REFUSED_CATEGORIES:
            return char
    return None


def _blank(match: re.Match[str]) -> str:
    token = match.group(0)
    # A comment becomes a space, a string literal an empty literal, and a quoted name a plain
    # placeholder name between spaces (so `CALL\`dbms\`.\`x\`()` is still seen as a call).
    if token.startswith("/"):
        return " "
    return " _quoted_ " if token.startswith("`") else "''"


def strip_literals(query: str) -> str:
    """The query with string literals, quoted names and comments blanked out."""
    stripped = _STRING_OR_COMMENT.sub(_blank, query)
    if _UNTERMINATED.search(stripped.replace("''", "")):
        raise QueryRejected("the query has an unterminated string, quoted name or comment")
    return stripped


def check_read_only(query: str) -> None:
    r"""Raise QueryRejected unless `query` is a single read-only Cypher statement.

    Rejected: write clauses (CREATE, INSERT, MERGE, DELETE, DETACH, NODETACH, SET, REMOVE,
    FOREACH), query options and versions (CYPHER ...), schema and
    admin commands (DROP, ALTER, GRANT, DENY, REVOKE, START/STOP DATABASE, SHOW, TERMINATE),
    LOAD CSV, USE (another database), CALL { } IN TRANSACTIONS, any procedure outside a short
    read-only allow-list (so dbms.*, db.create*, apoc.* and gds.* are refused), several
    statements in one string, control and invisible characters (\r, \x0b, \u2028, \u200b, ...:
    only \n and \t), unicode escapes (\uXXXX) and backslashes outside string literals.
    Keywords inside string literals, quoted names, comments, property keys (`n.set`), map keys
    (`{create: 1}`), labels (`:Merge`) and parameters do not count.
    """
    if not query.strip():
        raise QueryRejected("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRejected(f"the query is longer than {MAX_QUERY_CHARS} characters")
    refused = _refused_char(query)
    if refused is not None:
        raise QueryRejected(
            f"the query contains the control or invisible character {refused!r} "
            f"(U+{ord(refused):04X}); only plain spaces, tabs and \\n line breaks are allowed"
        )
    if _UNICODE_ESCAPE.search(query):
        raise QueryRejected(
            "unicode escapes (\\uXXXX) are not allowed: write the character itself or pass the "
            "text as a query parameter"
        )
    code = strip_literals(query)
    if "\\" in code:
        raise QueryRejected("a backslash is only allowed inside a string literal")
    if ";" in code.strip().rstrip(";"):
        raise QueryRejected("only one statement per query is allowed (found ';')")
    if _IN_TRANSACTIONS.search(code):
        raise QueryRejected("CALL { ... } IN TRANSACTIONS is a write construct and is not allowed")
    if _APOC.search(code):
        raise QueryRejected("APOC procedures and functions are not available on the read path")
    for match in _WORD.finditer(code):
        word = match.group(1).upper()
        if word in WRITE_KEYWORDS:
            raise QueryRejected(
                f"{word} is not allowed: the graph is read-only here "
                "(use MATCH / OPTIONAL MATCH / WITH / RETURN / CALL of a read procedure)"
            )
    for match in _CALL.finditer(code):
        name = re.sub(r"\s+", "", match.group(1)).lower()
        if name in READ_PROCEDURES:
            continue
        raise QueryRejected(
            f"procedure {match.group(1)!r} is not allowed; "
            f"allowed: {', '.join(sorted(READ_PROCEDURES))}"
        )


# --- the server's own reading of the query: its plan ----------------------------------------------

# Plan operators (operatorType without its `@database` suffix) that a read of the memory graph
# never needs: reading files and URLs, listing or stopping what the server runs, administration,
# and anything that writes or commits in batches. Writes are also refused by the query type.
_REFUSED_OPERATOR = re.compile(
    r"^(?:LoadCSV|Show|Terminate|Administration|SystemProcedure|Transaction|Foreach|Create|Merge"
    r"|Delete|DetachDelete|Set|Remove|Drop|Alter|Rename|Grant|Deny|Revoke|Start|Stop|Enable"
    r"|Deallocate|Reallocate|Lock|Assert|Dry)|Command|Admin|Procedure(?!Call$)",
)
READ_QUERY_TYPE = "r"
# A subquery expression (COLLECT / COUNT / EXISTS { ... }) inside a list comprehension, a CASE or
# another expression is planned as a nested plan: its operators are not in the tree, only in the
# text of the parent operator's Details (Neo4j 5.26.30, verified: `LOAD CSV FROM "file:///..." AS
# row` and `ResolvedCall(db.info() :: ...)` appear there and the query type stays 'r'). The text
# is searched for both; literals of the query may appear in it too, so a read whose string
# mentions LOAD CSV inside such a subquery is refused as well (a refusal, never a leak).
_NESTED_LOAD = re.compile(r"\bLOAD\s+CSV\b", re.I)
_NESTED_CALL = re.compile(
    r"\b(?:Resolved|Unresolved)?Call\(\s*([^\s(]+)\s*\(|\bCALL\s+([^\s({]+)", re.I
)


def _plan_operators(plan: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [plan]
    for child in plan.get("children") or ():
        found += _plan_operators(child)
    return found


def check_plan(query_type: str | None, plan: Mapping[str, Any] | None) -> None:
    """Raise QueryRejected unless Neo4j's own plan of a query (the summary of `EXPLAIN <query>`:
    its query type and operator tree) is a read of the graph and nothing else.

    Refused: a query type other than 'r' (writes 'rw'/'w', schema and administration 's'), LOAD
    CSV, a procedure outside READ_PROCEDURES (dbms.*, db.create*, ...), also where a subquery
    expression's nested plan holds them (the parent operator's Details), SHOW / TERMINATE,
    administration commands and CALL { } IN TRANSACTIONS, whatever the query text looked like.
    """
    if query_type != READ_QUERY_TYPE:
        raise QueryRejected(
            f"Neo4j classifies this query as {query_type!r}, not as a read ('r'): "
            "only reads of the memory graph are allowed"
        )
    if not plan:
        raise QueryRejected("Neo4j returned no plan for this query, so it cannot be checked")
    for operator in _plan_operators(plan):
        name = str(operator.get("operatorType") or "").split("@", 1)[0]
        details = str((operator.get("args") or {}).get("Details") or "")
        if not name or _REFUSED_OPERATOR.search(name):
            raise QueryRejected(
                f"the query plan holds {name or 'an unnamed step'!r}, which a read of the memory "
                "graph does not need (LOAD CSV, SHOW, TERMINATE, administration and "
                "IN TRANSACTIONS are not allowed)"
            )
        if _NESTED_LOAD.search(details):
            raise QueryRejected(
                "the query plan reads a file or URL (LOAD CSV) inside a subquery expression, "
                "which a read of the memory graph does not need"
            )
        for match in _NESTED_CALL.finditer(details):
            nested = (match.group(1) or match.group(2)).replace("`", "")
            if nested.lower() not in READ_PROCEDURES:
                raise QueryRejected(
                    f"the query plan calls procedure {nested!r} inside a subquery expression, "
                    f"which is not allowed; allowed: {', '.join(sorted(READ_PROCEDURES))}"
                )
        if name == "ProcedureCall":
            procedure = details.split("(", 1)[0].strip().replace("`", "")
            if procedure.lower() not in READ_PROCEDURES:
                raise QueryRejected(
                    f"the query plan calls procedure {procedure or details!r}, which is not "
                    f"allowed; allowed: {', '.join(sorted(READ_PROCEDURES))}"
                )
