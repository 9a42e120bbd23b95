"""dvc.yaml agrees with the code: modules, code deps, params, data deps, outs and metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scripts.sync_dvc_deps import DATA_PREFIXES, code_deps, code_files, dvcignore_covers, sync
from tests.conftest import REPO_ROOT

# Only what can change what a stage writes is a param of it. Read by the stages but deliberately
# no param, and kept in settings.yaml (how a run is carried out, not what it finds;
# tests/e2e/test_pipeline.py changes some of them and expects only the report stale, which
# depends on the whole file):
# - llm.timeout_seconds, llm.max_attempts, llm.concurrency, llm.stop_after_failures: when a call
#   is tried again or given up; a reply that comes after retries is the same reply, and a call
#   that finally fails stops the stage (or is counted under `max_failed_share`);
# - llm.cache, llm.cache_dir: where finished calls are kept; a cached reply is the reply;
# - budget.*: spend caps; a stage stops before passing them, it never writes other results;
# - estimate.* for ingest, answer and judge: they use it only for the budget check before their
#   first call (the report shows the estimate, hence its dep on settings.yaml);
# - graph.backend, docker_image, heap_mb, page_cache_mb, start_timeout_seconds,
#   stop_grace_seconds, query_timeout_seconds, write_batch_size: which Neo4j process holds the
#   graph and how it is fed; the exported graph and the agent's reads are the same;
# - fetch.timeout_seconds, judge.base_url, judge.timeout_seconds, judge.max_attempts: how the
#   pinned files are downloaded; their revision and sha256 pins decide the bytes;
# - <stage>.max_failed_share: how many failed calls a stage accepts before it stops; the ones it
#   accepted stand beside the score (failures.* in every comparison), so a change re-runs only
#   the report, whose record shows the shares (a stage that stopped has no lock: it runs again);
# - judge_check.min_agreement: where the record's warning starts, read by the report only;
# - slice.stop_on_findings: whether the data check's findings stop the slice; they are written
#   beside the slices either way;
# - models.<role>.api_base, max_tokens: where a model is reached (the model name says which
#   model) and how long a reply may be (a cut reply is flagged, a cut JSON reply fails);
# - report.*: the bootstrap of the record's intervals, read by the report only.
SYSTEM_SECTION = "${system}"
"""The picked system's own params section, as dvc.yaml names it (DVC fills in params `system`)."""
EXPECTED_PARAMS = {
    # what is downloaded (the dataset's repo, revision and file; the scorer's commit and files
    # with their sha256) is in pins.yaml, a dep; where it goes: schemas/layout.py
    "fetch": ["tier", "judge.protocols", "answer.protocol", "system", "replay"],  # the release;
    # the scoring and answer protocols' files; replay's published file
    "verify-hash": ["tier"],  # the size and sha256 it checks: the tier's, in pins.yaml
    # the tier's messages, their pinned hashes, where each cut goes: pins.yaml
    "repair": ["tier"],
    # the tier's question set (its fixture and the tokenizer: pins.yaml), the mode's question and
    # message ids; which conversations
    "slice": ["tier", "mode", "slice.conversations", "slice.cut"],
    "ingest": [
        "mode",  # max_llm_pairs is per mode
        "system",  # which memory is built (systems/registry.py)
        # chunking and resolution shape the graph (rag's chunks too)
        "ingest",
        # the picked system's own settings (rag's retriever, graphiti's episode, ...): any of
        # them may shape its memory, and DVC resolves the name from params `system`
        SYSTEM_SECTION,
        "models.extraction",  # the model and its context window (endpoint: settings.yaml)
        "models.resolution",
        "models.embedding",  # the vectors of a build that embeds
        "llm.seed",  # sent with every request and part of its cache key
    ],
    "answer": [
        "mode",  # written in run.json
        "system",  # which memory answers, and how
        "answer",  # step limit, result size, calls written as text
        SYSTEM_SECTION,  # its own settings: rag's top_k, mem0's, full_context's window, ...
        "models.agent",
        "models.embedding",  # the questions' vectors
        "llm.seed",
        "graph.row_limit",  # the most rows a read of the agent returns
    ],
    "judge": [
        "mode",  # written in run.json
        "judge.max_equivalence_calls",  # past it, event lines count as unmatched
        "judge.protocols",  # the scoring protocols that score the same answers
        "models.judge",
        "models.agent",  # the judge's model when models.judge.model is null
        "llm.seed",
    ],
    "judge-check": [
        "tier",  # its recipe is the tier's (pins.yaml)
        "mode",  # written in run.json
        "models.judge",
        "models.agent",  # the judge's model when models.judge.model is null
        "llm.seed",
    ],
    "report": [
        "tier",  # a pin of the record
        "mode",
        # what the record shows and the estimate beside the actual calls and tokens uses
        "ingest.chunk_tokens",
        "answer.max_steps",
        "answer.prefetch",  # the agent estimate's first prompt
        # its estimate reads its own settings: graphrag's pair caps and retrieval, rag's
        # retriever (embedding calls)
        SYSTEM_SECTION,
    ],
}
PINNED = {"fetch", "verify-hash", "repair", "slice", "judge", "judge-check", "report"}
"""The stages that read a pin, so depend on pins.yaml."""
ORDER = list(EXPECTED_PARAMS)
OPERATIONAL = (
    "llm.timeout_seconds",
    "llm.max_attempts",
    "llm.concurrency",
    "llm.cache",
    "llm.cache_dir",
    "llm.stop_after_failures",
    "llm.shared",  # one in-flight limit and ledger across processes (clients/llm/limits.py)
    "parallel.conversations",  # conversations at once: the outs are the same bytes whatever it is
    "budget",
    "graph.backend",
    "graph.docker_image",
    "graph.heap_mb",
    "graph.page_cache_mb",
    "graph.start_timeout_seconds",
    "graph.stop_grace_seconds",
    "graph.query_timeout_seconds",
    "graph.write_batch_size",
    "fetch.timeout_seconds",
    "judge.base_url",
    "judge.timeout_seconds",
    "judge.max_attempts",
    # the failures a stage may tolerate: they stand beside the score (failures.*)
    "ingest.max_failed_share",
    "answer.max_failed_share",
    "judge.max_failed_share",
    "judge_check.max_failed_share",
    # a warning of the record below this agreement, not a result
    "judge_check.min_agreement",
    # whether a data-check finding stops the slice (the findings are written either way)
    "slice.stop_on_findings",
    # where a model is reached and how long a reply may be (a cut reply is flagged or failed)
    "models.extraction.api_base",
    "models.extraction.max_tokens",
    "models.resolution.api_base",
    "models.resolution.max_tokens",
    "models.agent.api_base",
    "models.agent.max_tokens",
    "models.judge.api_base",
    "models.judge.max_tokens",
    "models.embedding.api_base",
    "models.embedding.batch_size",  # texts per request: the same vectors in any batch
    # the record's bootstrap: the intervals beside the score, read by the report only
    "report",
)
METRICS_FILES = {
    "slice": "metrics/slice.json",
    "report": "metrics/report.json",
}


def dvc_stages() -> dict[str, dict[str, object]]:
    return yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]


def test_code_deps_follow_packages_and_stop_at_the_models_started_by_name() -> None:
    # the door imports the test model and the local models; a stage reaching the door does not
    # run them, but it does a package whose __init__ holds code
    files = code_files("answer")
    assert "clients/llm/client.py" in files
    assert not [
        f for f in files if f.startswith(("clients/scripted", "clients/local_servers/local_model"))
    ]
    assert "clients/__init__.py" not in files  # empty: no dep
    # listed by package folder
    assert code_deps("answer") == ["bench", "clients", "schemas", "stages", "systems"]
    assert code_deps("repair") == ["bench", "clients", "schemas", "stages"]


def _dvcignore():  # type: ignore[no-untyped-def]
    from dvc.repo import Repo

    return Repo(str(REPO_ROOT)).dvcignore


@pytest.mark.parametrize("name", ORDER)
def test_folder_deps_cover_every_file_the_stage_runs(name: str) -> None:
    """DVC's own ignore filter (the one that hashes a folder dep) keeps no file a stage imports
    out of its deps."""
    ignore = _dvcignore()
    deps = code_deps(name)
    for file in code_files(name):
        assert file.split("/")[0] in deps, file
        assert not ignore.is_ignored_file(str(REPO_ROOT / file)), f".dvcignore hides {file}"


def test_folder_deps_leave_out_bytecode_and_the_models_started_by_name() -> None:
    """Neither the test model (nor its rules beside the prompts) nor the local model is hashed
    into a real stage's folder deps, and bytecode does not change them on every run."""
    from clients.scripted.backend import RULE_MODULES

    assert dvcignore_covers() == []
    ignore = _dvcignore()
    hidden = [
        *(REPO_ROOT / "clients" / "scripted").rglob("*.py"),
        *(REPO_ROOT / "clients" / "local_servers" / "local_model").rglob("*.py"),
        *(REPO_ROOT / f"{m.replace('.', '/')}.py" for m in RULE_MODULES),
        REPO_ROOT / "clients" / "__pycache__" / "files.cpython-311.pyc",
    ]
    assert len(hidden) > 5
    for path in hidden:
        assert ignore.is_ignored_file(str(path)), path.relative_to(REPO_ROOT)


def test_the_pipeline_has_the_stages_in_order() -> None:
    assert list(dvc_stages()) == ORDER


STAGE_SHELL = {"__init__", "common"}
"""The modules of stages/ that are no stage: the package, and the entry-point shell the stages (and
the commands beside them, commands/) share."""


def test_stages_holds_the_pipeline_stages_and_nothing_else() -> None:
    # a stage named `verify-hash` is stages/verify_hash.py (the only rename); a command a person
    # runs beside the pipeline belongs in commands/, where editing it re-runs no stage
    modules = {p.stem for p in (REPO_ROOT / "stages").iterdir() if p.name != "__pycache__"}
    assert all((REPO_ROOT / "stages" / f"{m}.py").is_file() for m in modules), modules
    assert modules - STAGE_SHELL == {name.replace("-", "_") for name in dvc_stages()}


@pytest.mark.parametrize("name", ORDER)
def test_stage_module_code_deps_and_params(name: str) -> None:
    stage = dvc_stages()[name]
    module = f"stages/{name.replace('-', '_')}.py"
    assert stage["cmd"] == f"python -m stages.{name.replace('-', '_')}"
    assert (REPO_ROOT / module).is_file()
    deps = stage["deps"]
    assert isinstance(deps, list)
    code = sorted(d for d in deps if not d.startswith(DATA_PREFIXES))
    assert code == code_deps(name), "run `uv run python scripts/sync_dvc_deps.py`"
    for dep in deps:
        if not dep.startswith(("data/", "metrics/")):
            assert (REPO_ROOT / dep).exists(), dep
    assert stage.get("params", []) == EXPECTED_PARAMS[name]
    assert ("pins.yaml" in deps) == (name in PINNED)
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    for key in (resolved(k, params) for k in EXPECTED_PARAMS[name]):
        node: object = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"params.yaml has no {key}"
            node = node[part]


def resolved(key: str, params: dict[str, object]) -> str:
    """A params key of dvc.yaml as DVC reads it: `${system}` is params' `system`."""
    return key.replace(SYSTEM_SECTION, str(params["system"]))


def test_every_installed_system_has_its_section_and_it_is_valid() -> None:
    """`${system}` must resolve to a section whatever system a run picks (DVC refuses a missing
    one), and each section holds what that system's own model accepts."""
    from schemas.params import Params
    from systems.registry import installed_systems, system_entry, system_settings

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    from tests.support.params import repo_params

    params = Params.model_validate(repo_params())
    for name in installed_systems():
        assert name in raw, f"params.yaml has no section `{name}:` (`{name}: {{}}` for none)"
        settings = system_settings(system_entry(name), params)
        assert (settings is None) == (system_entry(name).settings is None), name


def _leaves(value: object, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_leaves(v, f"{prefix}{k}.") for k, v in value.items()))
    return {prefix.rstrip(".")}


def test_how_a_run_is_carried_out_is_in_settings_yaml_and_no_stage_param() -> None:
    """settings.yaml holds exactly the operational keys and the estimator's rates, params.yaml
    none of them; no stage lists one as a param, nor a section all of whose keys are settings
    (`llm`, `report`; a section such as `models.agent` tracks only what params.yaml holds of it,
    a key a user adds there included); the report depends on the whole file (its record shows
    the estimate)."""
    settings = _leaves(yaml.safe_load((REPO_ROOT / "settings.yaml").read_text(encoding="utf-8")))
    params = _leaves(yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8")))
    operational = {k for k in settings if any(k == s or k.startswith(f"{s}.") for s in OPERATIONAL)}
    assert settings - operational == {k for k in settings if k.startswith("estimate.")}
    assert {s for s in OPERATIONAL if not any(k.startswith(s) for k in settings)} == set()
    assert settings & params == set()
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    for name, stage in dvc_stages().items():
        for key in stage.get("params", []):  # type: ignore[attr-defined]
            if key == SYSTEM_SECTION:  # the picked system's section, empty for one with none
                assert isinstance(raw[str(raw["system"])], dict), name
                continue
            assert key not in settings, (name, key)
            assert [p for p in params if p == key or p.startswith(f"{key}.")], (name, key)
        uses_file = "settings.yaml" in stage["deps"]  # type: ignore[operator]
        assert uses_file == (name == "report"), name


def test_the_pins_are_in_pins_yaml_only_and_no_stage_param() -> None:
    """pins.yaml holds what the benchmark runs on; params.yaml and settings.yaml none of it; no
    stage lists a pin as a param (each stage that reads one depends on the file)."""
    pins = _leaves(yaml.safe_load((REPO_ROOT / "pins.yaml").read_text(encoding="utf-8")))
    assert {p.split(".")[0] for p in pins} == {
        "release",
        "repair",
        "slice",
        "judge_check",
        "judge",
        "published",
    }
    for name in ("params.yaml", "settings.yaml"):
        other = _leaves(yaml.safe_load((REPO_ROOT / name).read_text(encoding="utf-8")))
        assert pins & other == set(), name
    for name, stage in dvc_stages().items():
        for key in stage.get("params", []):  # type: ignore[attr-defined]
            assert not [p for p in pins if p == key or p.startswith(f"{key}.")], (name, key)


def test_sync_script_would_change_nothing() -> None:
    text = (REPO_ROOT / "dvc.yaml").read_text()
    assert sync(text) == text


def _outs(stage: dict[str, object]) -> set[str]:
    paths: set[str] = set()
    for key in ("outs", "metrics", "plots"):
        for item in stage.get(key, []):  # type: ignore[attr-defined]
            paths.add(item if isinstance(item, str) else next(iter(item)))
    return paths


def test_each_data_dep_is_an_upstream_out_and_records_are_uncached() -> None:
    produced: set[str] = set()
    for name, stage in dvc_stages().items():
        for dep in stage["deps"]:  # type: ignore[attr-defined]
            # a stage reading a metrics or wall-time file would go stale on every re-run
            assert dep not in METRICS_FILES.values(), f"{name} depends on the metrics file {dep}"
            assert not "metrics/wall_time".startswith(dep), f"{name} reads wall time: {dep}"
            if dep.startswith(("data/", "metrics/")):
                # an earlier stage's out, or a folder of them (metrics/usage)
                made = dep in produced or any(p.startswith(f"{dep}/") for p in produced)
                assert made, f"{name} depends on {dep}, which no earlier stage makes"
        produced |= _outs(stage)
        for key in ("outs", "metrics", "plots"):
            for item in stage.get(key, []):  # type: ignore[attr-defined]
                path, options = next(iter(item.items())) if isinstance(item, dict) else (item, {})
                if key != "outs" or path.startswith(("metrics/", "reports/")):
                    # the records of a run, committed with it
                    assert path.startswith(("metrics/", "reports/")), path
                    assert options == {"cache": False}, path


def test_metrics_files_are_the_headline_and_the_chat_size() -> None:
    declared = {
        name: [next(iter(item)) for item in stage.get("metrics", [])]  # type: ignore[attr-defined]
        for name, stage in dvc_stages().items()
    }
    assert {name: paths for name, paths in declared.items() if paths} == {
        name: [path] for name, path in METRICS_FILES.items()
    }


def test_plots_name_files_the_report_writes_and_templates_that_exist() -> None:
    """Each chart is declared once: at the top level, over a plain out of the report (a stage's
    `plots:` entry would make `dvc plots show` draw its file again with the default template)."""
    spec = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())
    assert all("plots" not in stage for stage in spec["stages"].values())
    report_outs = {
        next(iter(item)): item[next(iter(item))]
        for item in spec["stages"]["report"]["outs"]
        if isinstance(item, dict)
    }
    assert [next(iter(plot)) for plot in spec["plots"]] == [
        "score_per_ability",
        "calls_per_phase",
        "tokens_per_phase",
    ]
    for plot in spec["plots"]:
        ((_, options),) = plot.items()
        for path in options["y"]:
            assert report_outs[path] == {"cache": False}, path
        template = options["template"]
        builtin = {"bar_horizontal", "linear", "simple", "scatter", "smooth", "confusion"}
        assert (
            template in builtin or Path(REPO_ROOT / ".dvc" / "plots" / f"{template}.json").is_file()
        )
