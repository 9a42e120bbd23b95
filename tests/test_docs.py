"""The README, the pages under docs/ and the docstrings are true to the tree: every file, folder
and module they name exists, and every environment variable the product reads is in the table of
the page that has one (docs/development.md)."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from tests.conftest import REPO_ROOT

PRODUCT = ("commands", "stages", "bench", "systems", "clients", "schemas")
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
"""The README and the reference pages under docs/."""
WRITTEN = [
    *PAGES,
    *sorted(
        p
        for package in (*PRODUCT, "scripts", "measure")
        for p in (REPO_ROOT / package).rglob("*.py")
    ),
]
"""What a newcomer reads: the README, the product's, the scripts' and the measurements' docstrings
and comments."""
NAMED_PATH = re.compile(
    r"(?<![\w./-])((?:commands|stages|bench|systems|clients|schemas|scripts|measure|measurements|docs|tests|fixtures|neo4j-jars)"
    r"/[\w./-]*\w)"
)
NAMED_MODULE = re.compile(
    r"(?<![\w./-])((?:commands|stages|bench|systems|clients|schemas)(?:\.[A-Za-z_]\w*)+)"
)
NOT_IN_THE_TREE = ("tests/artifacts", "tests/examples", "scripts/beam/", "scripts/utils/")
"""Folders named on purpose that a checkout does not hold: test outputs, llama.cpp's own
`tests/examples` (a build flag of the local model), and OmniMemEval's files read at their pin
(bench/protocols/omnimemeval.py)."""
ENV_READ = re.compile(
    r"""(?:\b(?:environ|env)(?:\.get\(\s*|\[\s*)|_ENV\s*=\s*|ENV_\w+\s*=\s*)"""
    r"""["']([A-Z][A-Z0-9_]+)["'](?!\]\s*=[^=])"""
)
"""A variable read (`os.environ.get("X")`, `env["X"]`, a `..._ENV = "X"` constant); setting one
for a child process (`env["X"] = ...`) is no read."""


def _named(pattern: re.Pattern[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in WRITTEN:
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(1).rstrip("."), set()).add(
                str(path.relative_to(REPO_ROOT))
            )
    return found


def _resolves(dotted: str) -> bool:
    """Whether `a.b.c` is a module, or a module's attribute (chain)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _history() -> set[str]:
    """Paths a migrated result names on purpose: the deleted script that measured its figures
    (git history keeps it), rendered into docs/measurements.md with the result."""
    named: set[str] = set()
    for path in (REPO_ROOT / "measurements").glob("*.json"):
        result = json.loads(path.read_text(encoding="utf-8"))
        if result["provenance"].startswith("migrated"):
            text = result["command"] + " " + result["provenance"]
            named |= {m.group(1) for m in NAMED_PATH.finditer(text)}
    return named


def test_every_file_and_folder_the_docs_name_exists() -> None:
    history = _history()
    missing = {
        path: sorted(where)
        for path, where in _named(NAMED_PATH).items()
        if "<" not in path
        and "*" not in path
        and not path.startswith(NOT_IN_THE_TREE)
        and path not in history
        and not (REPO_ROOT / path).exists()
    }
    assert missing == {}


def test_every_module_and_name_the_docs_cite_exists() -> None:
    missing = {
        name: sorted(where)
        for name, where in _named(NAMED_MODULE).items()
        if not name.endswith((".py", ".md", ".json", ".yaml", ".css", ".js"))
        and not _resolves(name)
    }
    assert missing == {}


def test_every_environment_variable_the_product_reads_is_in_the_docs_table() -> None:
    read = {
        name
        for package in PRODUCT
        for path in (REPO_ROOT / package).rglob("*.py")
        for name in ENV_READ.findall(path.read_text(encoding="utf-8"))
    }
    heading = "## Environment variables"
    holding = [p for p in PAGES if heading in p.read_text(encoding="utf-8")]
    assert len(holding) == 1, f"one page holds the table: {holding}"
    page = holding[0].read_text(encoding="utf-8")
    table = page[page.index(heading) :]
    first_cells = re.findall(r"^\| ([^|]*)\|", table, re.MULTILINE)
    rows = {name for cell in first_cells for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}
    assert {"HF_ENDPOINT", "BEAM_NEO4J_URI", "BEAM_RUN_ID"} <= read  # the scan sees them
    assert read - rows == set(), f"add them to the table in {holding[0].name}"


@pytest.mark.parametrize("planted", ["clients/no_such_module.py", "bench.report.no_such_name"])
def test_the_checks_see_a_wrong_name(planted: str) -> None:
    if "/" in planted:
        assert not (REPO_ROOT / planted).exists()
    else:
        assert not _resolves(planted)
    assert _resolves("clients.files.write_atomic")
