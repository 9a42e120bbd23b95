"""What README.md and docs/*.md show of the results in measurements/: each figure there is the
output of a cog block (`[[[cog ... ]]]`) that calls these helpers, so a page says what a result
file holds and nothing else. `make docs` renders the pages again (`cog -r`); tests/test_cog.py
runs `cog --check` on them, so a figure edited by hand, or a result changed without rendering
the pages, fails the tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from measure.result import ROOT, Result, read_result

PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
"""The pages cog renders and checks."""
COG_OPTIONS = ("--check-fail-msg", "a figure differs from measurements/: run `make docs`")


def result(name: str) -> Result:
    return read_result(name)


def value(name: str, path: str) -> Any:
    """A figure by its dotted path in the result's figures (`"shapes.perfect.scoring_ms"`)."""
    found: Any = result(name).figures
    for key in path.split("."):
        if not isinstance(found, dict) or key not in found:
            raise KeyError(f"measurements/{name}.json has no figure {path!r} (at {key!r})")
        found = found[key]
    return found


def number(found: Any, digits: int | None = None) -> str:
    """A figure as the pages write numbers: thousands separated, floats to `digits` places."""
    if isinstance(found, bool) or not isinstance(found, int | float):
        return str(found)
    if digits is not None:
        return f"{found:,.{digits}f}"
    return f"{found:,}"


def fig(name: str, path: str, digits: int | None = None) -> str:
    return number(value(name, path), digits)


def machine_text(found: Result) -> str:
    """What is known of the machine: a migrated result often knows only its cores, or nothing."""
    machine = found.machine
    parts = [
        f"{machine.cores} cores" if machine.cores else None,
        f"{machine.memory_gib} GiB" if machine.memory_gib else None,
        f"load {machine.load_1m}" if machine.load_1m is not None else None,
    ]
    return ", ".join(p for p in parts if p) or "machine not recorded"


def source(name: str) -> str:
    """Where a result comes from, in a few words: measured (the commit, date, machine) or
    migrated (the commit its figures were published at)."""
    found = result(name)
    kind = "measured" if found.provenance == "measured" else "migrated"
    where = machine_text(found)
    return f"{kind} at {found.commit[:7]}, {found.date[:10]}, {where}: `measurements/{name}.json`"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: int = 1) -> str:
    """A Markdown table; columns from `right` on are right-aligned (numbers)."""
    align = ["---" if i < right else "---:" for i in range(len(header))]
    lines = [header, align, *[[number(c) for c in row] for row in rows]]
    return "\n".join("| " + " | ".join(str(c) for c in line) + " |" for line in lines)


def pages() -> list[Path]:
    return [p for p in PAGES if p.is_file()]


def flat(figures: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Every figure by its dotted path, in key order (lists shown whole)."""
    rows: list[tuple[str, Any]] = []
    for key in sorted(figures):
        found = figures[key]
        if isinstance(found, dict) and found:
            rows += flat(found, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", found))
    return rows


def how_measured(name: str) -> str:
    """The first paragraph of the measurement's module docstring, or, for a deleted one-off,
    what its provenance says."""
    from measure.__main__ import MEASUREMENTS

    if name in MEASUREMENTS:
        import importlib

        doc = importlib.import_module(f"measure.{name}").__doc__ or ""
        return " ".join(doc.strip().split("\n\n")[0].split())
    return "A one-off experiment, deleted; its script is in git history."


def measurement_section(name: str) -> str:
    found = result(name)
    cells = [
        (f"`{path}`", "`" + str(v) + "`" if isinstance(v, list | str) else number(v))
        for path, v in flat(found.figures)
    ]
    lines = [
        f"### {name}",
        "",
        how_measured(name),
        "",
        f"- command: `{found.command}`",
        f"- commit `{found.commit}`, {found.date}; machine: {machine_text(found)}",
        f"- provenance: {found.provenance}",
        "",
        table(["figure", "value"], cells),
        "",
    ]
    return "\n".join(lines)


def all_results() -> list[str]:
    from measure.result import RESULTS

    return sorted(p.stem for p in RESULTS.glob("*.json"))


def tier_rows() -> list[tuple[str, dict[str, Any], str]]:
    """Each tier's figures and the result they come from: `tiers`, then a tier it lacks from a
    migrated `tiers_<tier>` result."""
    rows = [(tier, found, "tiers") for tier, found in value("tiers", "tiers").items()]
    for path in sorted((ROOT / "measurements").glob("tiers_*.json")):
        for tier, found in value(path.stem, "tiers").items():
            if tier not in {r[0] for r in rows}:
                rows.append((tier, found, path.stem))
    return rows


def millions(found: dict[str, Any], key: str) -> str:
    """Tokens in millions: from the count, or as published (`<key>_millions`)."""
    if key in found:
        return f"{found[key] / 1e6:.1f}M"
    return f"{found[key + '_millions']:.1f}M"


def sources(names: Sequence[str]) -> str:
    return "; ".join(source(n) for n in dict.fromkeys(names))


def tiers_table() -> str:
    """Each tier's size and every system's dry-run estimate of a whole run (`tiers`)."""
    rows = [
        [
            tier,
            t["conversations"],
            t["questions"],
            t["messages"],
            t["tokens"],
            t["chunks"],
            f"{t['graphrag.calls']:,} / {millions(t, 'graphrag.tokens')}",
            t["rag.calls"],
            millions(t, "full_context.tokens"),
        ]
        for tier, t, _ in tier_rows()
    ]
    header = ["tier", "conversations", "questions", "messages", "tokens", "chunks"]
    header += ["graphrag calls / tokens", "rag, full_context, no_memory calls"]
    header += ["full_context tokens"]
    names = [name for _, _, name in tier_rows()]
    return table(header, rows) + f"\n\n({sources(names)}.)"


def graph_sizes() -> str:
    """graphrag's expected graph per tier (`tiers`): the largest conversation's and the sum."""
    lines = [
        f"- {tier}: at most {t['graph.largest_nodes']:,} expected nodes per conversation, "
        f"{t['graph.nodes']:,} in all ({t['graph.chunk_text_mb']} MB of chunk text); a whole run "
        f"{t['graphrag.calls']:,} calls and {millions(t, 'graphrag.tokens')} tokens"
        for tier, t, _ in tier_rows()
    ]
    names = [name for _, _, name in tier_rows()]
    return "\n".join(lines) + f"\n\n({sources(names)}.)"


def repair_deltas(label: str) -> dict[str, int]:
    """A variant of `repairs` minus no repair: tokens, chunks, graphrag calls of mode all."""
    variants = value("repairs", "variants")
    base, found = variants["no repair"], variants[label]
    return {k: found[k] - base[k] for k in ("messages", "tokens", "chunks", "graphrag.calls")}


def official_cut_text() -> str:
    """What the benchmark's cut leaves out of mode all, against the whole repaired chat."""
    variants = value("repairs", "variants")
    whole, cut = variants["all pinned"], variants["official cut"]

    def left_out(key: str) -> str:
        return f"{whole[key] - cut[key]:,} of {whole[key]:,}"

    share = (whole["tokens"] - cut["tokens"]) / whole["tokens"] * 100
    return (
        f"In mode `all` the official cut leaves out {left_out('messages')} messages: "
        f"{left_out('tokens')} tokens ({share:.1f}%), {left_out('chunks')} chunks and "
        f"{whole['graphrag.calls'] - cut['graphrag.calls']:,} of graphrag's "
        f"{whole['graphrag.calls']:,} estimated calls ({source('repairs')})."
    )
