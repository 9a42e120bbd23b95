"""The embedder itself: tokenizer, ONNX graph, mean pooling and L2 normalisation (the recipe of
sentence-transformers' all-MiniLM-L6-v2). Loaded only by the server process."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from clients.local_servers.local_embedder.pins import LocalEmbedder
from clients.local_servers.local_embedder.protocol import Embeddings
from clients.local_servers.local_embedder.weights import EmbedderFiles

NORM_EPSILON = 1e-12
"""The smallest norm divided by (torch's F.normalize default, which sentence-transformers uses)."""


def load_tokenizer(path: str, max_tokens: int) -> Tokenizer:
    """The tokenizer with the model's cut and no padding of its own (the bundled tokenizer.json
    cuts and pads every input to 128 pieces; batches are padded here, to their longest input)."""
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens)
    return tokenizer


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The mean of each row's token vectors weighted by its attention mask, L2-normalised."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    means = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(means, axis=1, keepdims=True)
    return (means / np.clip(norms, NORM_EPSILON, None)).astype(np.float32)


def length_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Input indices grouped into forward passes, shortest inputs first (so that a pass pads
    little): at most batch_size inputs and, unless one input alone is longer, at most
    batch_tokens word pieces once padded (inputs x the longest). Ties keep the inputs' order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:  # lengths only grow along `order`: the newest input is the longest
        if current and (
            len(current) == batch_size or (len(current) + 1) * lengths[i] > batch_tokens
        ):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class Embedder:
    """One loaded model: `embed(texts)` gives a unit vector per text."""

    def __init__(
        self,
        spec: LocalEmbedder,
        files: EmbedderFiles,
        *,
        threads: int,
        batch_size: int,
        batch_tokens: int | None = None,
    ) -> None:
        """`batch_tokens` None: the model's own (LocalEmbedder.batch_tokens)."""
        batch_tokens = spec.batch_tokens if batch_tokens is None else batch_tokens
        if min(threads, batch_size, batch_tokens) < 1:
            raise ValueError(
                f"threads ({threads}), batch_size ({batch_size}) and batch_tokens "
                f"({batch_tokens}) must be >= 1"
            )
        self.spec = spec
        self.threads = threads
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.tokenizer = load_tokenizer(str(files.tokenizer), spec.max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # idle threads sleep instead of spinning: the cores are shared with the chat model
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(files.graph), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.input_names = {i.name for i in self.session.get_inputs()}

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """A unit vector per text, and the word pieces read (see Embeddings)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        vectors = np.zeros((len(texts), self.spec.dims), dtype=np.float32)
        for batch in length_batches(lengths, self.batch_size, self.batch_tokens):
            width = max(lengths[i] for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)  # [PAD] is id 0
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                ids[row, : lengths[i]] = encodings[i].ids
                mask[row, : lengths[i]] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            feeds = {name: value for name, value in feeds.items() if name in self.input_names}
            (hidden,) = self.session.run(["last_hidden_state"], feeds)
            vectors[batch] = mean_pool(hidden, mask)
        truncated = sum(1 for e in encodings if e.overflowing)
        return Embeddings(vectors=vectors, tokens=sum(lengths), truncated=truncated)
