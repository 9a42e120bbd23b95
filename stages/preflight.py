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
from stages.common import read_params, run_stage


def main() -> None:
    check_all_endpoints(read_params().models)
    print("preflight: every role's model endpoint answers", file=sys.stderr)


if __name__ == "__main__":
    run_stage(main)
