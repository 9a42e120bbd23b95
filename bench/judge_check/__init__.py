"""The judge check: how the judge model scores answers whose right score is known by construction.

The judge is the benchmark: the same answers get scores 2x apart under different judges. Before a
judge model's scores are trusted, this stage puts it through a calibration set built from the
rubrics themselves and reports how often it gives the known score.

One module per job: `alteration` (the text surgery that changes a statement's numbers, dates
and names), `cases` (the case records, how each kind is built, the recipe drawn and cut to a
mode's size), `recipe` (the pinned recipe fixture and the rubric items it names), `run` (the
judge calls) and `summary` (the results summarized, and the warning; records only, so the
report and the run's page import it without the rest). They take and return records; the stage
(stages/judge_check.py) reads params and files and writes the outs (paths in
`LAYOUT.judge_check`): the cases
(`CalibrationCase`: question, rubric item, the built answer, the expected score), the results
(`CheckResult`: the judge's score, reason and reply per case), the summary (`summarize_check`:
agreement overall and per kind, the expected x given confusion, the parse-failure rate), the
run record (the judge model), its usage and its metrics (wall time). The stage does not decide
pass or fail: `judge_warning(summary, min_agreement)` does, for the stage's log and the report.

Where the rubric items come from
--------------------------------
From the repaired release parquet (the repair stage's dataset), every question the recipe
names, whatever the mode: the slice's rubrics hold only the current mode's questions (two in
lite), so the same check would differ between modes. The recipe was drawn from the questions
of the slice fixture's full mode (the ones the benchmark scores). No dataset text is in the repo:
`fixtures/judge_check.json` holds the recipe only (question id, item index, kind, seed, donor
items) and each built case's sha256. A case whose hash differs stops the stage (IntegrityError
naming it): the rubric text changed, or the recipe is wrong. After a person has looked, the
recipe is drawn again with `python -m stages.judge_check --make-recipe`.

Items used: those of the abilities whose items are facts an answer states (contradiction
resolution, information extraction, knowledge update, multi-session reasoning, summarization,
temporal reasoning), with an `LLM response should <verb>:` lead-in. Left out: abstention (its item
*is* "there is no information": an "I don't know" answer complies), instruction and preference
following (their items are behaviours, "contains code blocks": writing the phrase down does not
comply), event ordering (scored by the equivalence judge, not the item judge).

The kinds, how each is built, and why its label holds
-----------------------------------------------------
The item's *statement* is the item with its lead-in dropped ("LLM response should state: 165
commits" -> "165 commits"); as an answer it is written as a sentence (first letter capitalized, a
full stop added).

- `stated` (1): the statement alone. The judge prompt scores 1 when the required element is
  present; the answer is that element word for word.
- `other_fact` (0): the statement of an item of a question of another conversation (the donor,
  named in the recipe). Guards: the donor shares no number, date or name with the item and at
  most a quarter of its content words, and is not the same text. It answers another question, so
  the required element is missing. May not hold where two conversations share a generic item
  ("there is contradictory information"): the guard rejects such donors.
- `altered` (0): the statement with every number, number word (one..twelve), month and weekday
  changed (names, capitalized words after the first, only where it has none of those), each
  from the case's seed: years by 3..9, days of month by at least 5 (1..28), percentages and other
  numbers out of [0.5x, 1.5x] of their value (never an equivalent form such as 4,200 vs 4.2k),
  month to another month, weekday to another weekday, name to a name from a fixed list. Guard:
  every changed token differs from its original, and no number, date or name of the original
  survives anywhere in the altered text (a date that still matches by accident, "from 65% to
  82%" with 65 turned into 82, is refused). Only short items (at most 6 content words) are used,
  so the changed value is the item's point: in a long item a changed incidental number may fairly
  be judged a "minor inaccuracy" (0.5), and such items are not used. An item with nothing to
  alter (or a version string like 0.6.2) is not buildable; the recipe holds buildable ones only.
- `empty` (0): "", "I don't know.", or another abstaining answer (chosen by the seed). No item
  used is an abstention item, so saying nothing never complies.
- `buried` (1): six statements of other conversations' items (donors, guarded as for
  `other_fact`) with the item's statement among them, never first or last, as one paragraph. The
  prompt says length and verbosity are not penalized and the element is present word for word.
  May not hold for a judge that treats off-topic facts as a non-responsive answer: that is a
  judge ignoring its prompt's style neutrality, which is what this check is for.

Every random choice is a function of the case's seed (sha256 of the seed and what is chosen),
so a build is the same on every machine and Python version.

Running it: one judge call per case, made exactly as the judge stage makes its item calls
(`item_messages` and its JudgeVerdict request), through the model layer (cache, retries, budget).
A reply with no valid verdict after the layer's retries counts as a parse failure (no score, a
disagreement); a call that failed on transport counts as a failed call, and more failed calls than
`judge_check.max_failed_share` stop the stage (exit 3), as in the other stages.
"""
