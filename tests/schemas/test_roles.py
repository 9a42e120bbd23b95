"""The model roles, named once: params configure the same roles, and the cost keys the report,
the comparison, the viewer and metrics/wall_time/ingest.json write stay as they were."""

from __future__ import annotations

from schemas.params import ModelsParams
from schemas.roles import COST_KEYS, INGEST_ROLES, ROLES, cost_key


def test_params_configure_every_role_in_pipeline_order() -> None:
    assert tuple(ModelsParams.model_fields) == ROLES


def test_cost_keys_name_the_build_roles_by_the_ingest_stage() -> None:
    # The keys of metrics/report.json, the record, the viewer's page and dvc.yaml's plots:
    # written out here so that a change to them is a decision, not a side effect.
    assert COST_KEYS == ("ingest_extraction", "ingest_resolution", "embedding", "agent", "judge")
    assert [cost_key(role) for role in INGEST_ROLES] == ["ingest_extraction", "ingest_resolution"]
    assert cost_key("judge") == "judge"
