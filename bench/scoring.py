"""Item scores: one rubric item's verdict read from the judge's reply, and the equivalence verdict.

Only the top-level JSON object of a reply counts, and only its own `score` (1, 0.5 or 0): a
score nested anywhere else (a list of verdicts, an object inside the reason) is no verdict,
and a reply cut at max_tokens is never scored from its fragment (`usable_reply`). One defect
of the benchmark's own scorer is corrected here: it casts the judge's score with `int()` in
some abilities, turning 0.5 into 0; we keep 0.5 (bench/beam_code.py reports both).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from clients.llm.port import Completion
from clients.llm.replies import parse_json_reply
from schemas.judging import ITEM_VALUES, ItemScore


def _item_value(raw: object) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            return None
    if not isinstance(raw, int | float):
        return None
    for value in ITEM_VALUES:
        if math.isclose(float(raw), value, abs_tol=1e-9):
            return value
    return None


def _verdict_score(raw: object) -> float:
    value = _item_value(raw)
    if value is None:
        raise ValueError(f"score {raw!r} is not one of 1, 0.5, 0")
    return value


def _verdict_schema(schema: dict[str, Any]) -> None:
    """The schema a server may turn into a grammar: exactly the two fields the benchmark's prompt
    asks for, in its order, the score one of the enum's values and the reason a string. (Replies
    are read more leniently: extra keys are ignored and the reason may be missing.)"""
    schema["properties"]["reason"] = {"title": "Reason", "type": "string"}
    schema["required"] = ["score", "reason"]
    schema["additionalProperties"] = False


class JudgeVerdict(BaseModel):
    """The reply the benchmark's judge prompt asks for. Only the top-level object counts: a score
    nested anywhere else (a list of verdicts, an object inside the reason) is no verdict."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_verdict_schema)

    score: Annotated[
        float,
        BeforeValidator(_verdict_score),
        Field(json_schema_extra={"enum": list(ITEM_VALUES)}),
    ]
    reason: str | None = None


NO_REPLY = "no usable judge reply (the call failed, or its reply was unusable or cut at max_tokens)"


def usable_reply(completion: Completion) -> tuple[str | None, str | None]:
    """(the reply to read, why there is none). A failed call and an unusable reply have none, and
    neither has a reply that stopped at max_tokens (`finish_reason` "length"): it is a fragment
    whatever it holds (its first object may close while a contradicting rest was cut), so it is
    never scored; like the others it is a failed call, counted with the judge's failures."""
    if completion.error is not None:
        return None, completion.error
    if completion.hit_max_tokens:
        return None, (
            f"the judge's reply stopped at max_tokens ({completion.completion_tokens} tokens); "
            f"a fragment is never scored: ...{(completion.text or '')[-120:]!r}"
        )
    if not (completion.text or "").strip():
        return None, "empty reply"
    return completion.text, None


def score_item(rubric_item: str, reply: str | None) -> ItemScore:
    """One rubric item's verdict from the judge's reply: the top-level JSON object with `score`
    1, 0.5 or 0 and a `reason`, read by the model layer's one parser (syntax slips repaired, a
    cut-off reply refused). No reply (None: see `usable_reply`), or one without a valid verdict,
    scores 0 with the cause recorded. (The model layer already asks again for a reply without
    one, so in a run this is the record of what was scored, and a parse error is left only by a
    reply that passed.)"""
    if reply is None:
        return ItemScore(rubric_item=rubric_item, score=0.0, error=NO_REPLY)
    try:
        verdict = JudgeVerdict.model_validate(parse_json_reply(reply))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()
        )
        return ItemScore(
            rubric_item=rubric_item,
            score=0.0,
            parse_error=True,
            error=f"no valid top-level verdict ({problems}): {reply[:200]!r}",
            reply=reply,
        )
    except ValueError as exc:  # UnusableReply: no JSON, or cut off
        return ItemScore(
            rubric_item=rubric_item, score=0.0, parse_error=True, error=str(exc), reply=reply
        )
    return ItemScore(
        rubric_item=rubric_item, score=verdict.score, reason=verdict.reason, reply=reply
    )


_YES = re.compile(r"\byes\b")


def parse_equivalence_reply(reply: str) -> bool:
    """The benchmark counts a reply as 'same event' when it contains "yes" (any case); we ask for
    the whole word, so "eyes" or "yesterday" in a chatty reply do not count."""
    return _YES.search(reply.lower()) is not None
