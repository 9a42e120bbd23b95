"""The systems under test by name: params `system` picks one, found through its entry point.

    system = load_system(params)                      # the run's system, mode and its sections
    system = load_system(params, answer_model=agent)  # full_context: the agent's context window

Every system registers a `SystemEntry` (systems/port.py) as an entry point of the group
`beam_memory.systems`; this project's own are in pyproject.toml:

| name         | memory file (data/ingest/conv<N>.jsonl) | params (own section first)          |
|--------------|-----------------------------------------|-------------------------------------|
| graphrag     | the knowledge graph's export            | graphrag, ingest, answer, graph     |
| full_context | the sessions                            | full_context                        |
| rag          | the chunks                              | rag, ingest.chunk_tokens            |
| no_memory    | empty                                   | -                                   |
| oracle       | each question's cited messages (gold)   | - (reads data/slice/rubrics.jsonl)  |
| mem0         | the memories Mem0 stored                | mem0, models.extraction, embedding  |
| graphiti     | its graph's export                      | graphiti, graph, models.extraction  |

A package of your own that registers an entry point in the same group is found the same way once
installed beside the project. Each reads `estimate` (the answer model's rates) for its estimate.
Only the picked system's module is imported, so a baseline never imports the Neo4j driver.

A system's own settings are the params section named after it, validated here by the model its
entry declares (`SystemEntry.settings`) and handed over as `SystemContext.settings`: a system of
your own has settings as the project's own do (`dvc exp run -S echo.scale=2`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from pydantic import ValidationError

from clients.llm.accounting import Accounting
from clients.llm.client import LlmClient, open_model
from clients.llm.embeddings import EmbeddingClient, EmbeddingModel, open_embedder
from schemas.base import Record
from schemas.errors import ParamsError
from schemas.params import EstimateParams, Mode, Params
from systems.port import ANSWER_ROLE, ENTRY_POINTS, MemorySystem, SystemContext, SystemEntry


def _entry_points() -> dict[str, list[EntryPoint]]:
    found: dict[str, list[EntryPoint]] = {}
    for point in entry_points(group=ENTRY_POINTS):
        found.setdefault(point.name, []).append(point)
    return found


def installed_systems() -> list[str]:
    """The names of the memory systems installed (this project's and any registered beside it)."""
    return sorted(_entry_points())


def system_name(params: Params) -> str:
    """The run's `system`, checked against the systems installed."""
    if params.system not in _entry_points():
        raise ParamsError(
            f"params.yaml: system must be one of {', '.join(installed_systems())}, found "
            f"{params.system!r} (a system of your own registers an entry point in the group "
            f"{ENTRY_POINTS!r}: README, 'Bring your own memory system')"
        )
    return params.system


def system_entry(name: str) -> SystemEntry:
    """The entry of the system `name`: its module imported, nothing else."""
    points = _entry_points().get(name, [])
    if not points:
        raise ParamsError(
            f"no memory system {name!r} is installed; installed: {', '.join(installed_systems())}"
        )
    if len(points) > 1:
        raise ParamsError(
            f"two memory systems are installed as {name!r} ({', '.join(p.value for p in points)}): "
            "uninstall one"
        )
    entry = points[0].load()
    if not isinstance(entry, SystemEntry) or entry.name != name:
        raise ParamsError(
            f"the entry point {name!r} ({points[0].value}) is not a SystemEntry named {name!r} "
            "(systems/port.py)"
        )
    return entry


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or '(section)'}: {error['msg']}"
        for error in exc.errors()
    )


def system_settings(entry: SystemEntry, params: Params) -> Record | None:
    """The system's own section (params `<name>:`) validated by its entry's settings model; a
    ParamsError naming the section and each bad key. A system with no model takes no settings."""
    section = params.section(entry.name)
    if entry.settings is None:
        if section:
            raise ParamsError(
                f"params.yaml `{entry.name}`: system {entry.name!r} declares no settings "
                f"(its SystemEntry has no `settings` model), found {', '.join(sorted(section))}"
            )
        return None
    try:
        return entry.settings.model_validate(section)
    except ValidationError as exc:
        raise ParamsError(
            f"params.yaml `{entry.name}` (the settings of system {entry.name!r}, "
            f"{entry.settings.__module__}.{entry.settings.__name__}) is invalid: "
            f"{_problems(exc)}"
        ) from exc


def lazy_embedder(
    params: Params, accounting: Accounting | None = None
) -> Callable[[], EmbeddingClient]:
    """The run's embedder (`models.embedding`), made and its endpoint checked on the first call
    only (ParamsError when params name none), its calls counted in `accounting`."""
    made: list[EmbeddingClient] = []
    lock = threading.Lock()

    def embedder() -> EmbeddingClient:
        with lock:
            if not made:
                client = open_embedder(params, accounting=accounting)
                client.check_endpoint()  # before its first call, as for every model
                made.append(client)
            return made[0]

    return embedder


def load_system(
    params: Params,
    name: str | None = None,
    *,
    answer_model: LlmClient | None = None,
    mode: Mode | None = None,
    rates: EstimateParams | None = None,
    embedder: Callable[[], EmbeddingModel] | None = None,
) -> MemorySystem:
    """The system `name` (default: params `system`) configured from the run's params.
    `answer_model` gives full_context the context window when `full_context.context_tokens` is
    null (default: the agent's model as params name it, asked without a call). `mode` and `rates`
    replace params' `mode` and `estimate` (the estimate of another mode, or with rates taken from
    a run: commands/estimate.py). `embedder` gives a system that embeds the stage's embedder
    (default: the params' `models.embedding`, opened on first use: `lazy_embedder`)."""
    entry = system_entry(name or system_name(params))
    model = answer_model

    def answer_window() -> int | None:
        nonlocal model
        if model is None:  # the estimate: the agent's model as params name it (no call)
            model = open_model(ANSWER_ROLE, params)
        return model.context_window()

    context = SystemContext(
        params=params,
        mode=mode or params.mode,
        rates=rates or params.estimate,
        answer_window=answer_window,
        embedder=embedder or lazy_embedder(params),
        settings=system_settings(entry, params),
    )
    return entry.build(context)
