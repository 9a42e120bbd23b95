"""budget: show or reset the spend ledger of a run (`python -m commands.budget show`)."""

from __future__ import annotations

import argparse

from clients.llm.accounting import Budget, describe, run_key_of, shared_run_keys
from clients.shared_root import shared_path
from schemas.params import MODES, TIERS, budget_scope
from stages.common import read_params, run_stage


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Show or reset the spend ledger of the run params.yaml describes (its tier, "
        "mode and models), or with --all every ledger of the tier's mode."
    )
    parser.add_argument("action", choices=["show", "reset"])
    parser.add_argument("--mode", choices=MODES, help="default: params.yaml's mode")
    parser.add_argument("--tier", choices=TIERS, help="default: params.yaml's tier")
    parser.add_argument("--all", action="store_true", help="every run's ledger of the mode")
    args = parser.parse_args(argv)

    from clients.llm.client import run_identity, shared_url

    params = read_params()
    tier, plain_mode = args.tier or params.tier, args.mode or params.mode
    cap = params.budget.cap(tier, plain_mode)
    mode = budget_scope(tier, plain_mode)
    ledger_dir = shared_path(params.llm.cache_dir)
    shared = shared_url(params.llm)
    if args.all and shared is not None:
        keys = shared_run_keys(shared, mode)
    elif args.all:
        keys = sorted(
            p.stem.removeprefix(f"budget-{mode}").lstrip("-")
            for p in ledger_dir.glob(f"budget-{mode}*.json")
        )
    else:
        keys = [run_key_of(mode, run_identity(params.models))]
    for key in keys:
        budget = Budget(mode, cap.calls, cap.tokens, ledger_dir, run_key=key, shared_url=shared)
        if args.action == "reset":
            budget.reset()
        print(describe(budget))
    if not keys:
        print(f"{mode}: no ledger in {shared or ledger_dir}")


if __name__ == "__main__":
    run_stage(lambda: main())
