"""Stand-ins for the scoring protocols' pinned files (pins.yaml `judge.protocol_sources`).

The texts are this project's own wording, written for the tests, with the real files' Python
shape: OmniMemEval's `scripts/utils/prompts.py` (two module-level format strings with the fields
its `beam_eval.py` fills) and `scripts/beam/beam_eval.py` (the two judge functions, each sending
a constant system message); ExaBase's `beam/exabase_prompts.py` as past.dev copies it
(`answer_prompt(query, context, cat, meta)` with guidance per category from the annotations,
`rubric_item_prompt(query, answer, rubric_item)` and `equivalence_prompt(ref_item, sys_item)`
returning f-strings, `RUBRIC_SCHEMA`, `EQUIVALENCE_SCHEMA`). The real ExaBase file carries no
licence to copy and is never held here; the real OmniMemEval files are read from
`../shared/published/omnimemeval` by the tests where that folder exists.
"""

from __future__ import annotations

import hashlib
from typing import Any

OMNI_REPO = "example-owner/OmniMemEval-standin"
OMNI_COMMIT = "1111111111111111111111111111111111111111"
EXA_REPO = "example-owner/exabase-standin"
EXA_COMMIT = "2222222222222222222222222222222222222222"

OMNI_PROMPTS = '''\
"""Stand-in prompts (test wording)."""

OTHER_PROMPT = """Not used: {nothing}"""

BEAM_RUBRIC_ITEM_JUDGE_PROMPT = """\\
Stand-in item grader.

## QUESTION:
{question}

## RUBRIC CRITERION:
{rubric_item}

## RESPONSE TO EVALUATE:
{response}

Reply as JSON: {{"score": <0.0 | 0.5 | 1.0>, "reason": "<why>"}}\\
"""

BEAM_EVENT_ORDERING_JUDGE_PROMPT = """\\
Stand-in order grader: place each reference event in the response.

## QUESTION:
{question}

## REFERENCE ORDERING:
{reference_ordering}

## RESPONSE TO EVALUATE:
{response}

Reply as JSON: {{"positions": [{{"event": "<label>", "position": <int or -1>}}]}}\\
"""
'''

OMNI_EVAL = '''\
"""Stand-in evaluation script (test wording): only the two callers' shapes."""
from utils.prompts import BEAM_RUBRIC_ITEM_JUDGE_PROMPT, BEAM_EVENT_ORDERING_JUDGE_PROMPT


async def _judge_rubric_item(llm_client, eval_model, question, rubric_item, response):
    prompt = BEAM_RUBRIC_ITEM_JUDGE_PROMPT.format(
        question=question, rubric_item=rubric_item, response=response
    )
    return await llm_client.chat.completions.create(
        model=eval_model,
        messages=[
            {"role": "system", "content": "Stand-in item judge system line."},
            {"role": "user", "content": prompt},
        ],
    )


async def _judge_event_ordering(llm_client, eval_model, question, rubric_items, response):
    return await llm_client.chat.completions.create(
        model=eval_model,
        messages=[
            {"role": "system", "content": "Stand-in order judge system line."},
            {"role": "user", "content": "..."},
        ],
    )
'''

EXA_PROMPTS = '''\
"""Stand-in for ExaBase's prompts as past.dev copies them (test wording only)."""


def answer_prompt(query: str, context: str, cat: str, meta: dict) -> str:
    category_guidance = ""
    if cat == "abstention":
        why = meta.get("why_unanswerable", "")
        category_guidance = "STAND-IN ABSTAIN." + (f"\\n\\nWhy: {why}" if why else "")
    elif cat == "event_ordering":
        topics = meta.get("ordering_tested", [])
        category_guidance = "STAND-IN ORDER:\\n" + "\\n".join(f"  - {t}" for t in topics)
    elif cat == "temporal_reasoning":
        guidance = "STAND-IN TIME."
        if meta.get("time_points", []):
            guidance += f"\\n\\nPoints: {'; '.join(meta['time_points'])}"
        if meta.get("calculation_required", ""):
            guidance += f"\\n\\nHint: {meta['calculation_required']}"
        category_guidance = guidance
    elif cat == "preference_following":
        category_guidance = f"STAND-IN PREFER: {meta.get('preference_being_tested', '')}"
    elif cat == "instruction_following":
        indicators = ", ".join(meta.get("compliance_indicators", []))
        category_guidance = (
            f"STAND-IN FOLLOW: {meta.get('instruction_being_tested', '')}\\n\\n{indicators}"
        )
    elif cat == "summarization":
        hints = [r.split(": ", 1)[-1] if ": " in r else r for r in meta.get("rubric", [])]
        category_guidance = "STAND-IN COVER:\\n" + "\\n".join(f"  - {h}" for h in hints)
    elif cat == "knowledge_update":
        category_guidance = "STAND-IN LATEST ONLY."

    return f"""Stand-in answerer frame.

{category_guidance}

Question: {query}

Context:
{context}

Answer:"""


def rubric_item_prompt(query: str, answer: str, rubric_item: str) -> str:
    prompt = f"""Stand-in rubric grader.

## QUESTION:
{query}

## LLM RESPONSE:
{answer}

## RUBRIC CRITERION:
{rubric_item}

Score 1.0, 0.5 or 0.0 and say why in a line."""
    return prompt


RUBRIC_SCHEMA = {
    "properties": {"score": {"type": "number"}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
}


def equivalence_prompt(ref_item: str, sys_item: str) -> str:
    prompt = f"""Stand-in: same event? YES or NO.

First: {ref_item}
Second: {sys_item}"""
    return prompt


EQUIVALENCE_SCHEMA = {
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
'''


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def standin_protocol_files() -> dict[str, dict[str, bytes]]:
    """Per protocol, its stand-in files by repository path."""
    return {
        "omnimemeval": {
            "scripts/beam/beam_eval.py": OMNI_EVAL.encode(),
            "scripts/utils/prompts.py": OMNI_PROMPTS.encode(),
        },
        "exabase": {"beam/exabase_prompts.py": EXA_PROMPTS.encode()},
    }


def standin_protocol_pins() -> dict[str, dict[str, Any]]:
    """pins.yaml `judge.protocol_sources` for the stand-ins."""
    origin = {"omnimemeval": (OMNI_REPO, OMNI_COMMIT), "exabase": (EXA_REPO, EXA_COMMIT)}
    return {
        name: {
            "repo": origin[name][0],
            "commit": origin[name][1],
            "files": {path: sha256_of(data) for path, data in files.items()},
        }
        for name, files in standin_protocol_files().items()
    }


def standin_raw_files() -> dict[str, bytes]:
    """The stand-ins as raw.githubusercontent.com lays them out: `/<repo>/<commit>/<path>`."""
    origin = {"omnimemeval": (OMNI_REPO, OMNI_COMMIT), "exabase": (EXA_REPO, EXA_COMMIT)}
    return {
        f"/{origin[name][0]}/{origin[name][1]}/{path}": data
        for name, files in standin_protocol_files().items()
        for path, data in files.items()
    }
