"""shared_root: the checkout whose run state every experiment of a repository shares.

`dvc exp run --temp` and queued experiments (`dvc exp run --queue ...; dvc queue start -j N`) run
in a copy of the repository at `<checkout>/.dvc/tmp/exps/<tmp...>/` (DVC's TempDirExecutor; a
plain `dvc exp run` and `dvc repro` run in the checkout itself). What a run keeps outside its
results must not live in that copy: the Neo4j jars (`make neo4j` puts them in the checkout's
`.cache/neo4j/lib`), the call cache and the spend ledger (`llm.cache_dir`, `.cache/llm`). A copy
of its own would have no jars, repeat every call another experiment made, and give each
experiment its own cap. So they are looked up under `shared_root()`:

1. `BEAM_SHARED_ROOT`, when set (an explicit override: any folder; a relative one is taken from
   the working directory);
2. else, when this code runs in an experiment's copy (its folder is `<R>/.dvc/tmp/exps/<name>`
   for a queued experiment, `<R>/.dvc/tmp/exps/standalone/<name>` for `--temp`), the checkout
   `R` the experiment was made from;
3. else `base`: the working directory for run state (the call cache and the ledger: a stage run in
   a scratch folder keeps its own, as before), the checkout this code is in for the jars
   (`make neo4j` puts them there once).

DVC also tells a queued or temporary experiment's stages the parent checkout in `DVC_ROOT`
(dvc/repo/experiments/queue/base.py sets it in the run's environment), but a plain `dvc repro`
keeps a `DVC_ROOT` the caller's environment already holds (dvc/stage/run.py sets it only when
missing), so a stale value could send the state elsewhere. So the copy's own location decides,
and `DVC_ROOT` is taken only for code inside its `.dvc/tmp` in a layout not listed here. Both
name the same folder in an experiment.

Sharing is safe under parallel workers: cache entries are written to a temp file and renamed
(clients/llm/cache.py), embeddings go to one SQLite file in WAL mode with a busy timeout
(clients/llm/embedding_cache.py) and the ledger is updated under an exclusive `fcntl.flock`
(clients/llm/accounting.py), both across processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SHARED_ROOT_ENV = "BEAM_SHARED_ROOT"
CODE_ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT_COPY_FOLDERS = (Path(".dvc/tmp/exps"), Path(".dvc/tmp/exps/standalone"))
"""Where DVC makes an experiment's copy, inside the checkout: queued experiments (the queue's
workers) and `--temp` ones (dvc/repo/experiments/utils.py EXEC_TMP_DIR, queue/tempdir.py)."""


def experiment_origin(root: Path, dvc_root: str | None = None) -> Path | None:
    """The checkout an experiment's copy at `root` was made from; None when `root` is no copy.

    DVC's `DVC_ROOT` (`dvc_root`) is taken only for a copy inside its own `.dvc/tmp` (a layout
    of a later DVC), never for code elsewhere: a stale value can then mislead nothing."""
    for folder in EXPERIMENT_COPY_FOLDERS:
        depth = len(folder.parts)
        if len(root.parents) > depth and root.parent == root.parents[depth] / folder:
            return root.parents[depth]
    if dvc_root and root.is_relative_to(Path(dvc_root) / ".dvc" / "tmp"):
        return Path(dvc_root)
    return None


def shared_root(environ: Mapping[str, str] | None = None, code_root: Path | None = None) -> Path:
    """The folder whose `.cache` every experiment of this repository shares (module doc);
    `code_root` is the folder to start from (default: the working directory)."""
    environ = os.environ if environ is None else environ
    override = environ.get(SHARED_ROOT_ENV)
    if override:
        return Path(override).expanduser().resolve()
    start = Path.cwd().resolve() if code_root is None else code_root
    return experiment_origin(start, environ.get("DVC_ROOT")) or start


def shared_path(
    path: str | Path, environ: Mapping[str, str] | None = None, *, base: Path | None = None
) -> Path:
    """`path` as given when absolute, else under `shared_root(environ, base)`: the checkout an
    experiment's copy was made from, not the copy."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else shared_root(environ, base) / path
