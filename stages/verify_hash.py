"""verify-hash: check the fetched parquet's size and sha256 against the pins; write a receipt.

The entry point only: it reads params, calls the core in bench/verify_hash.py (whose docstring
says what the stage reads and writes, and how) and writes the outs.
"""

from __future__ import annotations

from bench.fetch import FETCH_OUT
from bench.verify_hash import RECEIPT, verify
from stages.common import read_params, run_stage


def main() -> None:
    expected = read_params().verify_hash
    receipt = verify(FETCH_OUT, expected, RECEIPT)
    print(f"verify-hash: {receipt.path} is {receipt.size_bytes:,} bytes, sha256 {receipt.sha256}")


if __name__ == "__main__":
    run_stage(main)
