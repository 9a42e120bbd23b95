"""preflight: check every role's model endpoint before a run downloads or computes anything.

`make run` calls it first, so a missing model server is reported at once, for every role that
uses it, instead of after the dataset download and the slicing. It makes no model call (Ollama:
its model list; an OpenAI-compatible server: its /models; any endpoint off this machine: its key
variable; a `local/` model: that `make local-model` built its server and weights, which the first
request starts). Not a DVC stage: the stages run the same check themselves before their first
call.
"""

from __future__ import annotations

import sys

from clients.llm.client import check_all_endpoints
from schemas.roles import Role
from stages.common import read_params, run_stage
from systems.port import MemorySystem
from systems.registry import load_system


def run_roles(system: MemorySystem) -> tuple[Role, ...]:
    """The roles a run of `system` calls: its build's, the embedder where it embeds, the agent
    and the judge."""
    embeds = ("embedding",) if getattr(system, "embeds", False) else ()
    return (*system.build_roles, *embeds, "agent", "judge")


def main() -> None:
    params = read_params()
    check_all_endpoints(params.models, run_roles(load_system(params)))
    print("preflight: every model endpoint the run uses answers", file=sys.stderr)


if __name__ == "__main__":
    run_stage(main)
