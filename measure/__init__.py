"""Named measurements of the harness on this machine: `python -m measure <name>` (`make measure
NAME=<name>`) runs one and writes its figures, with the commit, the machine and the date they were
taken on, to `measurements/<name>.json`; `python -m measure --list` names them all."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's bundled map: no network
