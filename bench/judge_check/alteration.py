"""The text surgery that makes calibration cases: a rubric item's statement, its content words,
and the statement with every number, date or name changed (`alter`), each choice a function of
the case's seed. Pure."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

NAMES: tuple[str, ...] = ("Priya", "Mateo", "Hannah", "Kenji", "Amara", "Tobias", "Leila", "Ruben")

_LEAD_IN = re.compile(r"^\s*LLM response should \w+\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+(?:[.,'%$-][a-z0-9%]+)*%?")
_STOP_TEXT = """
a an the and or but of to in on at by for with from as is are was were be been it its this that
these those your you i my me we our their they he she his her so than then there which what who
how when where not no
"""
_STOP = frozenset(_STOP_TEXT.split())
_MONTHS_TEXT = (
    "January February March April May June July August September October November December"
)
_MONTHS = _MONTHS_TEXT.split()
_WEEKDAYS_TEXT = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
_WEEKDAYS = _WEEKDAYS_TEXT.split()
_NUMBER_WORDS_TEXT = "one two three four five six seven eight nine ten eleven twelve"
_NUMBER_WORDS = _NUMBER_WORDS_TEXT.split()
_MONTH_RE = "|".join(_MONTHS)
_TOKEN = re.compile(
    rf"(?P<version>\d+\.\d+\.\d+)"
    rf"|(?P<month>\b(?:{_MONTH_RE})\b)(?P<day>\s+\d{{1,2}}\b(?!,\d{{3}}))?"
    rf"|(?P<weekday>\b(?:{'|'.join(_WEEKDAYS)})(?=s?\b))"
    rf"|(?P<numword>\b(?i:{'|'.join(_NUMBER_WORDS)})\b)"
    r"|(?P<number>(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\d.,])\d+(?:\.\d+)?)"
    r"(?P<percent>\s*(?:%|percent(?:age)?\b))?"
)
_YEAR_BEFORE = re.compile(
    rf"(?:\b(?:{_MONTH_RE})\s+\d{{1,2}},?\s*|\b(?i:in|of|since|by|until|till|from|to)\s+)$"
)
"""What comes before a number in 1900..2100 that makes it a year ("March 15, 2024", "in 2023")."""
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]{2,}\b")
_CAPITAL_BEFORE = re.compile(r"\b[A-Z][\w'-]*[\s-]+$")
_CAPITAL_AFTER = re.compile(r"[\s-]+[A-Z]")
_NOT_NAMES = frozenset({"LLM", "You", "The", "We", "She", "They", "Based"})


def statement_of(rubric_item: str) -> str | None:
    """The item without its `LLM response should <verb>:` lead-in (None when it has none)."""
    match = _LEAD_IN.match(rubric_item)
    if match is None:
        return None
    statement = rubric_item[match.end() :].strip()
    return statement or None


def as_sentence(statement: str) -> str:
    """The statement as an answer sentence: first letter capitalized, a full stop at the end."""
    text = statement.strip()
    text = text[:1].upper() + text[1:]
    return text if text[-1:] in ".?!" else text + "."


def words(text: str) -> set[str]:
    """Lower-case content words (numbers included, `$`/commas/decimals kept inside)."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def overlap(reference: str, candidate: str) -> float:
    """Share of the reference's content words found in the candidate."""
    wanted = words(reference)
    return len(wanted & words(candidate)) / len(wanted) if wanted else 0.0


def seeded_choice(seed: int, label: str, count: int) -> int:
    """A number in [0, count) from the seed and what it chooses: the same on every machine."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


_NOT_A_NUMBER_BEFORE = re.compile(
    r"\b(?i:which|no|any|each|every|this|that|the|another|some|someone|anyone)\s+$"
)


def _value_matches(text: str) -> list[re.Match[str]]:
    """The numbers, number words, months and weekdays of a text; "one" after a determiner
    ("which one", "no one") is a pronoun, not a number."""
    return [
        m
        for m in _TOKEN.finditer(text)
        if not (
            m["numword"]
            and m["numword"].lower() == "one"
            and _NOT_A_NUMBER_BEFORE.search(text[: m.start()])
        )
    ]


def key_tokens(text: str, *, names: bool = True) -> set[str]:
    """The numbers (as values), number words, months, weekdays and (with `names`) names of a
    text, normalized: what an altered statement must share none of with its original."""
    found: set[str] = set()
    for match in _value_matches(text):
        if match["month"]:
            found.add(match["month"].lower())
            if match["day"]:
                found.add(str(int(match["day"])))
        elif match["weekday"]:
            found.add(match["weekday"].lower())
        elif match["numword"]:
            found.add(str(_NUMBER_WORDS.index(match["numword"].lower()) + 1))
        elif match["number"]:
            found.add(_number_key(match["number"]))
        elif match["version"]:
            found.add(match["version"])
    if names:
        found |= {n.lower() for n in _names(text)}
    return found


def _number_key(text: str) -> str:
    value = float(text.replace(",", ""))
    return str(int(value)) if value.is_integer() else repr(value)


def _names(text: str, *, isolated: bool = False) -> list[str]:
    """Capitalized words after the first word that are not months, weekdays or stock words;
    with `isolated`, only those with no capitalized word beside them (a person's first name,
    not one word of "Google Calendar", where a changed word leaves a half-right name)."""
    found = []
    for match in _CAPITALIZED.finditer(text):
        word = match.group(0)
        base = word[:-1] if word.endswith("s") and word[:-1] in _WEEKDAYS else word
        if match.start() == 0 or base in _MONTHS or base in _WEEKDAYS or word in _NOT_NAMES:
            continue
        beside = _CAPITAL_BEFORE.search(text[: match.start()]) or _CAPITAL_AFTER.match(
            text[match.end() :]
        )
        if isolated and beside:
            continue
        found.append(word)
    return found


def _far_values(value: float, low: int, high: int) -> list[int]:
    """Integers in [low, high] outside [0.5 v, 1.5 v]: never a near miss a judge may forgive."""
    return [c for c in range(low, high + 1) if c < 0.5 * value or c > 1.5 * value]


def _format_number(value: float, like: str) -> str:
    decimals = len(like.split(".", 1)[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}" if "," in like else f"{value:.{decimals}f}"
    return text


def _new_number(original: str, percent: bool, year: bool, seed: int, label: str) -> str | None:
    value = float(original.replace(",", ""))
    if year:
        shift = (3, 4, 5, 6, 7, 8, 9, -3, -4, -5, -6, -7, -8, -9)
        return str(int(value) + shift[seeded_choice(seed, label, len(shift))])
    if percent:
        options = _far_values(value, 5, 100)
        return str(options[seeded_choice(seed, label, len(options))]) if options else None
    factor = (3, 4, 5, 6)[seeded_choice(seed, label, 4)]
    return _format_number(value * factor if value else factor, original)


def _replacement(
    group: str, match: re.Match[str], statement: str, seed: int, label: str
) -> str | None:
    """The new text of one matched value (`group`: month, day, weekday, numword or number);
    None when no replacement fits."""
    original = key_tokens(statement, names=False)

    def pick(options: Sequence[str]) -> str | None:
        return options[seeded_choice(seed, label, len(options))] if options else None

    old = match[group]
    if group == "weekday":
        return pick([w for w in _WEEKDAYS if w.lower() not in original])
    if group == "month":
        return pick([m for m in _MONTHS if m.lower() not in original])
    if group == "day":
        day = int(old)
        return pick([f" {d}" for d in range(1, 29) if abs(d - day) >= 5 and str(d) not in original])
    if group == "numword":
        value = _NUMBER_WORDS.index(old.lower()) + 1
        far = [_NUMBER_WORDS[v - 1] for v in _far_values(value, 1, 12) if str(v) not in original]
        new = pick(far)
        return None if new is None else new.capitalize() if old[0].isupper() else new
    year = (
        old.isdigit()
        and 1900 <= int(old) <= 2100
        and _YEAR_BEFORE.search(statement[: match.start()]) is not None
    )
    return _new_number(old, bool(match["percent"]), year, seed, label)


def alter(statement: str, seed: int) -> str | None:
    """The statement with every number, number word, month and weekday changed (its names
    where it has none of those), or None when there is nothing to alter, a version string,
    or no replacement that leaves none of the original's values in the text. The same value
    is changed the same way wherever it occurs."""
    matches = _value_matches(statement)
    if any(m["version"] for m in matches):
        return None
    edits: list[tuple[int, int, str]] = []  # (start, end, new text)
    chosen: dict[str, str | None] = {}
    for index, match in enumerate(matches):
        spans = [g for g in ("month", "day", "weekday", "numword", "number") if match[g]]
        for group in spans:
            key = f"{group}:{match[group].strip().lower()}"
            if key not in chosen:
                chosen[key] = _replacement(group, match, statement, seed, f"{index}{group}")
            new = chosen[key]
            if new is None:
                return None
            edits.append((match.start(group), match.end(group), new))
    original = key_tokens(statement, names=False)
    if not edits:  # no number or date: change the names, if any
        original = key_tokens(statement)
        pool = [n for n in NAMES if n.lower() not in original]
        for position, name in enumerate(sorted(set(_names(statement, isolated=True)))):
            new = pool[(seeded_choice(seed, name, len(pool)) + position) % len(pool)]
            edits += [(m.start(), m.end(), new) for m in re.finditer(rf"\b{name}\b", statement)]
    if not edits:
        return None
    altered = statement
    for start, end, new in sorted(edits, reverse=True):
        if altered[start:end].strip().lower() == new.strip().lower():
            return None
        altered = altered[:start] + new + altered[end:]
    if altered == statement or key_tokens(altered) & original:
        return None  # a value of the original survives: the label would not hold
    return altered
