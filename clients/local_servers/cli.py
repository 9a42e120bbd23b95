"""What the two `build | serve` commands share (`python -m clients.local_servers.local_model`,
`python -m clients.local_servers.local_embedder`): sizes as they print them, and one way to end
on a failure the user can act on."""

from __future__ import annotations

import sys
from collections.abc import Callable

from schemas.errors import FetchError, IntegrityError, ServiceError


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def run_reporting_errors(command: Callable[[], int]) -> int:
    """`command()`'s exit code; a fetch, integrity or server failure is printed as `error: ...`
    on stderr and exits 2 (no traceback: the message says what to do)."""
    try:
        return command()
    except (ServiceError, FetchError, IntegrityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
