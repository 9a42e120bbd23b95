"""Reading the params: params.yaml laid over the settings.yaml beside it, with the pins.yaml beside
it, once, into one record."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schemas.errors import ParamsError
from schemas.params import merge_settings
from stages.common import PINS_FILE, SETTINGS_FILE, params_mapping, read_params
from tests.conftest import REPO_ROOT
from tests.support.params import repo_params


def _write(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_a_key_in_params_wins_over_settings_and_sections_merge_key_by_key() -> None:
    settings = {"llm": {"concurrency": 2, "cache": True}, "budget": {"lite": {"calls": 1}}}
    params = {"llm": {"concurrency": 1, "seed": 0}, "mode": "lite"}
    assert merge_settings(settings, params) == {
        "llm": {"concurrency": 1, "cache": True, "seed": 0},
        "budget": {"lite": {"calls": 1}},
        "mode": "lite",
    }
    assert settings == {"llm": {"concurrency": 2, "cache": True}, "budget": {"lite": {"calls": 1}}}


def test_the_repository_params_read_both_files(tmp_path: Path) -> None:
    both = read_params(REPO_ROOT / "params.yaml")
    settings = yaml.safe_load((REPO_ROOT / SETTINGS_FILE).read_text(encoding="utf-8"))
    assert both.llm.concurrency == settings["llm"]["concurrency"]
    assert both.graph.backend == settings["graph"]["backend"]
    # one params.yaml holding everything (what tests write into their folders) reads the same
    alone = _write(tmp_path, "params.yaml", repo_params())
    assert read_params(alone) == both


def _repo_file(name: str) -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((REPO_ROOT / name).read_text(encoding="utf-8"))
    return data


def test_dvc_exp_run_s_on_params_yaml_overrides_settings_yaml(tmp_path: Path) -> None:
    merged = repo_params()
    settings, params = _repo_file(SETTINGS_FILE), _repo_file("params.yaml")
    _write(tmp_path, SETTINGS_FILE, settings)
    _write(tmp_path, PINS_FILE, _repo_file(PINS_FILE))
    llm = params["llm"]
    assert isinstance(llm, dict)
    path = _write(tmp_path, "params.yaml", params | {"llm": llm | {"concurrency": 7}})
    assert read_params(path).llm.concurrency == 7
    assert read_params(path).llm.timeout_seconds == merged["llm"]["timeout_seconds"]


def test_a_pin_set_outside_pins_yaml_is_refused_naming_it(tmp_path: Path) -> None:
    params = _repo_file("params.yaml")
    _write(tmp_path, SETTINGS_FILE, _repo_file(SETTINGS_FILE))
    _write(tmp_path, PINS_FILE, _repo_file(PINS_FILE))
    revision = {"release": {"100K": {"revision": "0" * 40}}}
    path = _write(tmp_path, "params.yaml", params | revision)
    with pytest.raises(
        ParamsError, match=r"release\.100K\.revision: set in .*pins\.yaml and again in"
    ):
        read_params(path)
    with pytest.raises(ParamsError, match=r"dvc exp run -S pins\.yaml:release\.100K\.revision="):
        read_params(path)


def test_a_missing_key_or_a_bad_file_names_the_files(tmp_path: Path) -> None:
    path = _write(tmp_path, "params.yaml", _repo_file("params.yaml"))  # nothing beside it
    with pytest.raises(
        ParamsError, match=r"params\.yaml \(with settings\.yaml, pins\.yaml\) is invalid: .*llm"
    ):
        read_params(path)
    (tmp_path / SETTINGS_FILE).write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"settings\.yaml must hold a mapping of sections"):
        params_mapping(path)
    (tmp_path / SETTINGS_FILE).write_text("llm: [unclosed\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"settings\.yaml is not valid YAML"):
        read_params(path)
    with pytest.raises(ParamsError, match="not found: run stages from the repository root"):
        read_params(tmp_path / "elsewhere" / "params.yaml")
