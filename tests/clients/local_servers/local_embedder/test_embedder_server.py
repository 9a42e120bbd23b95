"""The local embedding server (clients/local_servers/local_embedder/) as a client sees it: the real
model in its own process, over HTTP and through litellm, and the process gone afterwards.

Needs the embedder's files in the cache (`python -m clients.local_servers.local_embedder build`, in
`make local-model`; a session selecting these tests fetches them in the background, seconds).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clients.local_servers.local_embedder import (
    installed_embedder,
    live_servers,
    local_embedder_server,
)
from clients.local_servers.local_model import LocalEndpoint
from clients.local_servers.running import (
    local_embedder_endpoint,
    running_local_embedders,
    stop_local_servers,
)
from tests.conftest import skip_or_fail

pytestmark = [pytest.mark.local_model, pytest.mark.process]

MODEL = "local/all-minilm-l6-v2"
CAT = "The cat sat on the mat"
CAT_AGAIN = "A cat was sitting on a rug"
TAXES = "Quarterly tax filing deadline"
MIXED = [
    CAT,
    "hi",
    "I'd like a packing list for three days of hiking in the Alps in late September, please.",
    TAXES,
    " ".join(["Sure, here is a detailed plan for your week:"] * 60),  # past 256 word pieces
    CAT_AGAIN,
]


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def post(
    endpoint: LocalEndpoint, body: dict[str, Any] | bytes, key: str | None = None
) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{endpoint.base_url}/embeddings", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def embed(endpoint: LocalEndpoint, texts: list[str]) -> np.ndarray:
    status, answer = post(endpoint, {"model": MODEL, "input": texts}, endpoint.api_key)
    assert status == 200, answer
    assert [row["index"] for row in answer["data"]] == list(range(len(texts)))
    return np.array([row["embedding"] for row in answer["data"]], dtype=np.float64)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    if installed_embedder(MODEL) is None:
        skip_or_fail(f"the files of {MODEL} are not in the cache: run `make local-model`")
    with local_embedder_server(MODEL) as end:
        [server] = live_servers()
        yield end
    assert not live_servers()
    assert not pid_alive(server.pid or 0)  # the process is gone once the block is left
    assert server.home is not None and not server.home.exists()  # and so is its folder


def test_health_needs_no_key_and_embeddings_do(endpoint: LocalEndpoint) -> None:
    with urllib.request.urlopen(endpoint.base_url.removesuffix("/v1") + "/health") as response:
        assert response.status == 200
    for key in (None, "not-the-key"):
        status, answer = post(endpoint, {"input": CAT}, key)
        assert status == 401 and "API key" in answer["error"]["message"]


def test_a_bad_body_is_a_400_that_says_why(endpoint: LocalEndpoint) -> None:
    status, answer = post(endpoint, {"input": [1, 2, 3]}, endpoint.api_key)
    assert status == 400 and "strings" in answer["error"]["message"]
    status, answer = post(endpoint, b"{", endpoint.api_key)
    assert status == 400 and "not JSON" in answer["error"]["message"]
    status, answer = post(endpoint, {"input": ["x"] * 513}, endpoint.api_key)
    assert status == 400 and "at most 512" in answer["error"]["message"]


def test_vectors_have_384_unit_dimensions_and_repeat_exactly(endpoint: LocalEndpoint) -> None:
    first = embed(endpoint, MIXED)
    assert first.shape == (len(MIXED), 384)
    assert np.linalg.norm(first, axis=1) == pytest.approx(np.ones(len(MIXED)), abs=1e-5)
    assert np.array_equal(embed(endpoint, MIXED), first)


def test_usage_counts_word_pieces_up_to_the_cut(endpoint: LocalEndpoint) -> None:
    status, answer = post(endpoint, {"input": [CAT, MIXED[4]]}, endpoint.api_key)
    assert status == 200
    # [CLS] the cat sat on the mat [SEP] is 8 pieces; the long text is cut at 256
    assert answer["usage"] == {"prompt_tokens": 8 + 256, "total_tokens": 8 + 256}


def test_a_paraphrase_is_closer_than_an_unrelated_text(endpoint: LocalEndpoint) -> None:
    cat, again, taxes = embed(endpoint, [CAT, CAT_AGAIN, TAXES])
    assert float(cat @ again) > 0.6 > 0.2 > float(cat @ taxes)
    assert float(cat @ again) > float(again @ taxes) + 0.4


def test_batching_changes_no_vector(endpoint: LocalEndpoint) -> None:
    batched = embed(endpoint, MIXED)
    one_by_one = np.vstack([embed(endpoint, [text]) for text in MIXED])
    assert np.abs(batched - one_by_one).max() < 1e-5


def test_base64_is_the_same_vector(endpoint: LocalEndpoint) -> None:
    status, answer = post(endpoint, {"input": [CAT], "encoding_format": "base64"}, endpoint.api_key)
    assert status == 200
    packed = np.frombuffer(base64.b64decode(answer["data"][0]["embedding"]), dtype="<f4")
    assert np.abs(packed - embed(endpoint, [CAT])[0]).max() < 1e-7


def test_litellm_reads_the_vectors(endpoint: LocalEndpoint) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    reply = litellm.embedding(
        model="openai/all-minilm-l6-v2",
        api_base=endpoint.base_url,
        api_key=endpoint.api_key,
        input=[CAT, TAXES],
        timeout=30,
    )
    vectors = np.array([row["embedding"] for row in reply.data])
    assert vectors.shape == (2, 384)
    assert np.abs(vectors - embed(endpoint, [CAT, TAXES])).max() < 1e-6
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 8 + 6  # [CLS] quarterly tax filing deadline [SEP]


def test_one_server_per_process_for_the_door() -> None:
    if installed_embedder(MODEL) is None:
        skip_or_fail(f"the files of {MODEL} are not in the cache: run `make local-model`")
    try:
        first = local_embedder_endpoint(MODEL)
        assert local_embedder_endpoint(MODEL) == first
        assert running_local_embedders() == {MODEL: first.base_url}
        [server] = [s for s in live_servers() if s.base_url == first.base_url]
        assert embed(first, [CAT]).shape == (1, 384)
    finally:
        stop_local_servers()
    assert running_local_embedders() == {}
    assert not pid_alive(server.pid or 0)


def test_a_taken_port_is_retried_on_another(monkeypatch: pytest.MonkeyPatch) -> None:
    if installed_embedder(MODEL) is None:
        skip_or_fail(f"the files of {MODEL} are not in the cache: run `make local-model`")
    from clients.local_servers import process

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1], process.find_free_port()]
        monkeypatch.setattr(process, "find_free_port", lambda: ports.pop(0))
        with local_embedder_server(MODEL) as end:
            assert not ports and embed(end, [CAT]).shape == (1, 384)
