"""fetch: the pinned BEAM parquet into `data/fetch/dataset.parquet`, and the benchmark's pinned

The entry point only: it reads params, calls the core in bench/fetch.py (whose docstring says what
the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

from bench.fetch import FETCH_OUT, fetch, fetch_scorer
from clients.hub import resolve_endpoint
from stages.common import read_params, run_stage


def main() -> None:
    run = read_params()
    params, judge = run.fetch, run.judge
    endpoint = resolve_endpoint()
    cached = fetch(params, FETCH_OUT, endpoint=endpoint)
    origin = "the HF cache (no request)" if cached else endpoint
    print(
        f"fetch: {params.repo_id}@{params.revision}:{params.filename} from {origin} -> {FETCH_OUT}"
    )
    for path in fetch_scorer(judge):
        print(f"fetch: scorer file {judge.scorer_repo}@{judge.scorer_commit} -> {path}")


if __name__ == "__main__":
    run_stage(main)
