"""What makes small and local models usable, without a server: per-role request settings and
their place in the cache key, the judge's fallback, content "" on tool-call turns, the label
enums of the extraction schema, replies cut at max_tokens, keys for loopback endpoints, the
context window, and the preflight of a `local/` model. (The requests on the wire are checked
against the loopback server in tests/clients/llm/test_small_models.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel

from bench.report import memory_table
from clients.llm.client import LlmClient, local_context_tokens, resolve_model
from clients.llm.litellm_door import (
    LOCAL_KEY,
    LitellmBackend,
    check_endpoint_ref,
    is_loopback,
    key_source,
)
from clients.llm.port import ChatRequest, Completion, Message, RawReply, ToolCall
from clients.llm.replies import cut_at_max_tokens
from schemas.errors import ServiceError
from schemas.memory import ENTITY_LABELS, STATEMENT_LABELS
from schemas.params import ROLE_MAX_TOKENS, LlmParams, ModelRef, ModelsParams
from schemas.records import Question
from systems.graphrag.agent import answer_question
from systems.graphrag.extract import ExtractedEntity, ExtractedStatement, ExtractionReply

LOCAL = "local/smollm2-135m-instruct"


def llm_params(tmp_path: Path, seed: int = 0) -> LlmParams:
    return LlmParams(
        timeout_seconds=5,
        max_attempts=2,
        concurrency=1,
        seed=seed,
        cache=False,
        cache_dir=str(tmp_path / "cache"),
    )


def test_every_role_has_a_max_tokens_and_the_global_seed_by_default(tmp_path: Path) -> None:
    params = llm_params(tmp_path, seed=11)
    assert ROLE_MAX_TOKENS == {"extraction": 2048, "resolution": 1024, "agent": 1024, "judge": 512}
    for role, expected in ROLE_MAX_TOKENS.items():
        client = LlmClient(role, ModelRef(model="scripted/rules"), params)  # type: ignore[arg-type]
        settings = client.settings
        assert (settings.max_tokens, settings.temperature, settings.seed) == (expected, 0.0, 11)
        assert settings.extra_body == {} and settings.context_tokens is None
    own = ModelRef(model="scripted/rules", max_tokens=77, temperature=0.3, seed=5)
    settings = LlmClient("agent", own, params).settings
    assert (settings.max_tokens, settings.temperature, settings.seed) == (77, 0.3, 5)
    request = ChatRequest((Message.user("x"),), task="agent", prompt_version="v", max_tokens=9)
    assert settings.max_tokens_for(request) == 9  # a request's own cap wins


def test_a_judge_that_falls_back_keeps_its_own_reply_settings() -> None:
    agent = ModelRef(
        model="openai/m",
        api_base="http://127.0.0.1:1/v1",
        max_tokens=900,
        temperature=0.7,
        seed=3,
        context_tokens=4096,
        extra_body={"top_k": 1},
    )
    models = ModelsParams(
        extraction=agent, resolution=agent, agent=agent, judge=ModelRef(model=None)
    )
    judge = resolve_model(models, "judge")
    assert (judge.model, judge.api_base, judge.context_tokens) == (
        agent.model,
        agent.api_base,
        4096,
    )
    assert judge.extra_body == {"top_k": 1}  # provider options belong to the model
    assert (judge.max_tokens, judge.temperature, judge.seed) == (None, 0.0, None)  # its own


def test_the_cache_key_changes_with_every_request_setting(tmp_path: Path) -> None:
    request = ChatRequest((Message.user("hi"),), task="agent", prompt_version="v1")

    def key(ref: ModelRef, seed: int = 0) -> str:
        client = LlmClient("agent", ref, llm_params(tmp_path, seed=seed))
        return client._key(request, [m.to_openai() for m in request.messages], native=False)

    base_ref = ModelRef(model="scripted/rules")
    base = key(base_ref)
    variants = [
        key(base_ref.model_copy(update={"max_tokens": 1025})),
        key(base_ref.model_copy(update={"temperature": 0.5})),
        key(base_ref.model_copy(update={"seed": 1})),
        key(base_ref.model_copy(update={"extra_body": {"top_k": 1}})),
        key(base_ref.model_copy(update={"context_tokens": 4096})),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # the same max_tokens given explicitly or by the role's default is the same request
    assert key(base_ref.model_copy(update={"max_tokens": ROLE_MAX_TOKENS["agent"]})) == base
    # the seed sent is what counts: the role's own, else the global one
    assert key(base_ref.model_copy(update={"seed": 0})) == base
    assert key(base_ref, seed=1) == key(base_ref.model_copy(update={"seed": 1})) != base


def test_an_assistant_tool_call_turn_has_empty_content_not_null() -> None:
    call = ToolCall(id="c1", name="search_memory", raw_arguments="{}", arguments={})
    turn = Message.assistant(None, [call]).to_openai()
    assert turn["content"] == "" and turn["tool_calls"][0]["function"]["name"] == "search_memory"
    assert Message.assistant("thinking", [call]).to_openai()["content"] == "thinking"
    assert Message.tool_result(call, "[]").to_openai()["content"] == "[]"


def _defs(model: type[BaseModel]) -> dict[str, dict[str, object]]:
    schema = model.model_json_schema()
    return {**schema.get("$defs", {}), model.__name__: schema}


def test_the_extraction_schema_names_the_labels_as_enums_and_allows_no_other_keys() -> None:
    defs = _defs(ExtractionReply)
    entity, statement = defs["ExtractedEntity"], defs["ExtractedStatement"]
    assert entity["properties"]["label"]["enum"] == list(ENTITY_LABELS)  # type: ignore[index]
    assert statement["properties"]["label"]["enum"] == list(STATEMENT_LABELS)  # type: ignore[index]
    for name in ("ExtractionReply", "ExtractedEntity", "ExtractedStatement", "ExtractedRelation"):
        assert defs[name]["additionalProperties"] is False, name
    assert entity["required"] == ["key", "label", "name"]
    assert statement["required"] == ["key", "label", "text"]
    assert defs["ExtractionReply"]["required"] == ["entities", "statements", "relations"]


def test_extraction_reading_stays_loose_item_by_item() -> None:
    # A model without a grammar: a label in the wrong case is matched, an unknown one is kept
    # (validate_batch drops and counts it), and neither sinks the reply.
    reply = ExtractionReply.model_validate(
        {
            "entities": [
                {"key": "e1", "label": " person", "name": "Ana"},
                {"key": "e2", "label": "Spaceship", "name": "Falcon"},
            ],
            "statements": [{"key": "s1", "label": "FACT", "text": "Ana bakes.", "extra": 1}],
        }
    )
    assert [e.label for e in reply.entities] == ["Person", "Spaceship"]
    assert reply.statements[0].label == "Fact" and reply.relations == []
    assert ExtractedEntity(key="e", label="Topic").name is None
    assert ExtractedStatement(key="s", label="Measure").text is None


def _raw(
    text: str | None, finish: str | None, calls: Sequence[tuple[str, str, str]] = ()
) -> RawReply:
    return RawReply(text=text, tool_calls=list(calls), finish_reason=finish)


def test_a_reply_cut_at_max_tokens_is_no_use_where_json_is_due() -> None:
    class Verdict(BaseModel):
        score: float

    schema = ChatRequest((Message.user("x"),), task="judge", prompt_version="v", schema=Verdict)
    text = ChatRequest((Message.user("x"),), task="agent", prompt_version="v")
    whole = '{"score": 1.0}'  # parses, and was still cut: contradicting lines may have followed
    assert cut_at_max_tokens(schema, _raw(whole, "length")) == "its Verdict JSON was cut"
    assert cut_at_max_tokens(schema, _raw(whole, "stop")) is None
    assert cut_at_max_tokens(text, _raw("The answer is", "length")) is None  # kept, flagged
    assert cut_at_max_tokens(text, _raw("  ", "length")) == "it wrote no text"
    assert cut_at_max_tokens(text, _raw(None, "length", [("c", "f", "{}")])) is None
    assert Completion(model="m", text="The answer is", finish_reason="length").hit_max_tokens
    assert not Completion(model="m", text="Done.", finish_reason="stop").hit_max_tokens


@pytest.mark.parametrize(
    ("api_base", "loopback"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434", True),
        ("http://127.3.4.5/v1", True),
        ("http://[::1]:8000/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://192.168.1.5:8000/v1", False),
        ("http://localhost.example.com/v1", False),
        (None, False),
        ("", False),
    ],
)
def test_loopback_endpoints_are_recognised(api_base: str | None, loopback: bool) -> None:
    assert is_loopback(api_base) is loopback


def test_a_key_is_dummy_on_loopback_and_a_clear_stop_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = ModelRef(model="openai/m", api_base="http://127.0.0.1:8080/v1")
    assert key_source("agent", local) == "dummy" and LOCAL_KEY == "sk-local"
    assert key_source("agent", ModelRef(model=LOCAL)) == "dummy"
    assert key_source("agent", ModelRef(model="ollama_chat/g", api_base="http://h:1")) is None
    remote = ModelRef(model="openai/m", api_base="https://llm.example.com/v1")
    with pytest.raises(ServiceError) as err:
        key_source("judge", remote)
    text = str(err.value)
    assert "OPENAI_API_KEY" in text and "models.judge" in text and "llm.example.com" in text
    with pytest.raises(ServiceError, match="OPENAI_API_KEY"):
        check_endpoint_ref("judge", remote)  # the preflight stops there, before any request
    with pytest.raises(ServiceError, match=r"MY_KEY.*models\.agent\.api_key_env"):
        key_source("agent", local.model_copy(update={"api_key_env": "MY_KEY"}))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    assert key_source("judge", remote) is None  # litellm reads the provider's own variable
    assert key_source("agent", local) is None  # a key that is set is used, even on loopback


def test_the_context_window_comes_from_params_then_what_is_known(tmp_path: Path) -> None:
    params = llm_params(tmp_path)
    window = LlmClient("agent", ModelRef(model="openai/m", context_tokens=6000), params)
    assert window.context_window() == 6000
    assert LlmClient("agent", ModelRef(model="openai/gpt-4o-mini"), params).context_window() == (
        128000  # litellm's model map
    )
    assert LlmClient("agent", ModelRef(model="openai/unknown-x"), params).context_window() is None
    assert LlmClient("agent", ModelRef(model="scripted/rules"), params).context_window() is None
    assert LlmClient("agent", ModelRef(model=LOCAL), params).context_window() == 8192


def test_ollama_gets_the_context_window_as_num_ctx_and_its_options_merged(
    tmp_path: Path,
) -> None:
    # litellm puts provider kwargs into Ollama's `options`; an `options` in extra_body would
    # replace them all (temperature, num_predict, seed), so its entries are merged instead.
    ref = ModelRef(
        model="ollama_chat/gemma4:31b",
        api_base="http://127.0.0.1:9",
        context_tokens=32768,
        extra_body={"options": {"num_thread": 2}, "keep_alive": "5m"},
    )
    sent = LitellmBackend(ref, llm_params(tmp_path), "agent")._static_kwargs()
    assert (sent["num_ctx"], sent["num_thread"]) == (32768, 2)
    assert sent["extra_body"] == {"keep_alive": "5m"} and "api_key" not in sent
    openai = ModelRef(model="openai/m", api_base="http://127.0.0.1:9/v1", extra_body={"top_k": 1})
    sent = LitellmBackend(openai, llm_params(tmp_path), "agent")._static_kwargs()
    assert sent["extra_body"] == {"top_k": 1} and "num_ctx" not in sent


def test_one_local_server_gets_the_largest_context_its_roles_ask_for() -> None:
    small = ModelRef(model=LOCAL, context_tokens=2048)
    models = ModelsParams(
        extraction=small,
        resolution=ModelRef(model=LOCAL, context_tokens=4096),
        agent=ModelRef(model="scripted/rules"),
        judge=ModelRef(model=None),
    )
    assert local_context_tokens(models, LOCAL) == 4096
    assert local_context_tokens(models, "scripted/rules") is None
    everyone = models.model_copy(update={"agent": ModelRef(model=LOCAL)})
    assert local_context_tokens(everyone, LOCAL) == 8192  # null: the trained length


def test_the_preflight_of_a_local_model_checks_its_build_not_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BEAM_LOCAL_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ServiceError) as err:
        check_endpoint_ref("agent", ModelRef(model=LOCAL))
    text = str(err.value)
    assert "make local-model" in text and "runtime" in text and "weights" in text
    assert not (tmp_path / "empty-cache").exists()  # nothing fetched or built
    with pytest.raises(ServiceError, match="unknown local model"):
        check_endpoint_ref("agent", ModelRef(model="local/no-such-model"))
    with pytest.raises(ServiceError, match=r"models\.agent\.context_tokens is 32768"):
        check_endpoint_ref("agent", ModelRef(model=LOCAL, context_tokens=32768))
    with pytest.raises(ServiceError, match=r"models\.agent\.api_base"):
        check_endpoint_ref("agent", ModelRef(model=LOCAL, api_base="http://127.0.0.1:1/v1"))


class _Turns:
    role = "agent"
    test_model = True

    def __init__(self, completions: Sequence[Completion]) -> None:
        self.completions = list(completions)

    def complete(self, request: ChatRequest) -> Completion:
        return self.completions.pop(0)


def test_an_agent_answer_cut_at_max_tokens_sets_the_traces_error() -> None:
    question = Question(
        id="conv1:information_extraction:0",
        conversation_id="1",
        ability="information_extraction",
        index=0,
        question="Where do I work?",
    )
    cut = Completion(model="m", text="You work at Elm Street Ba", finish_reason="length")
    trace = answer_question(question, _Turns([cut]), tools=None, max_steps=2)  # type: ignore[arg-type]
    assert trace.answer == "You work at Elm Street Ba"  # kept for a reader
    assert trace.error is not None and "models.agent.max_tokens" in trace.error
    whole = Completion(model="m", text="At Elm Street Bakery.", finish_reason="stop")
    assert answer_question(question, _Turns([whole]), tools=None, max_steps=2).error is None  # type: ignore[arg-type]


def test_the_record_shows_failed_extractions_beside_empty_ones() -> None:
    counts = {
        "chunks": 3,
        "entities": 0,
        "statements": 0,
        "relationships": 9,
        "supersedes": 0,
        "contradicts": 0,
        "empty_extractions": 0,
        "failed_extractions": 3,
    }
    header, _, row = memory_table("graphrag", {"conv17": counts})[2:5]
    columns = [c.strip() for c in header.strip("|").split("|")]
    values = [c.strip() for c in row.strip("|").split("|")]
    assert dict(zip(columns, values, strict=True))["failed extractions"] == "3"
