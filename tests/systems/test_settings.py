"""Each system's own settings: the params section named after it, validated by the model its
entry declares (systems/port.py `SystemEntry.settings`) and handed over by the registry; a
top-level key that is neither the harness's nor an installed system's is refused."""

from __future__ import annotations

import pytest

from schemas.errors import ParamsError
from stages.common import parse_params
from systems.rag import RagParams
from systems.registry import load_system
from tests.support.params import params_with


def test_a_top_level_key_no_installed_system_claims_is_refused_naming_what_it_could_be() -> None:
    with pytest.raises(ParamsError) as raised:
        parse_params(params_with(ragg={"top_k": 3}))
    assert "unknown section(s) ragg" in str(raised.value)
    assert "graphrag, mem0, no_memory, oracle, rag" in str(raised.value)
    with pytest.raises(ParamsError, match="rag: a top-level key beyond the harness's sections"):
        parse_params(params_with(rag=3))


def test_the_picked_system_gets_its_section_as_its_own_model() -> None:
    params = parse_params(params_with(system="rag", rag={"top_k": 7, "retriever": "bm25"}))
    system = load_system(params)
    assert getattr(system, "top_k") == 7  # noqa: B009 (Rag's field, not the port's)
    # keys left out take the model's defaults
    defaults = parse_params({**params_with(system="rag"), "rag": {}})
    assert getattr(load_system(defaults), "top_k") == RagParams().top_k  # noqa: B009


def test_a_bad_setting_names_the_section_the_key_and_the_model() -> None:
    params = parse_params(params_with(system="rag", rag={"top_k": 0, "retriver": "dense"}))
    with pytest.raises(ParamsError) as raised:
        load_system(params)
    message = str(raised.value)
    assert "params.yaml `rag` (the settings of system 'rag', systems.rag.RagParams)" in message
    assert "top_k: Input should be greater than or equal to 1" in message
    assert "retriver: Extra inputs are not permitted" in message


def test_a_system_without_settings_refuses_a_section_with_keys() -> None:
    params = parse_params(params_with(system="no_memory", no_memory={"top_k": 3}))
    with pytest.raises(ParamsError, match="system 'no_memory' declares no settings"):
        load_system(params)
