"""OpenAI's embeddings API as the local embedder serves it: the request checked, the answer
built (pure: bytes and numbers in, records and dicts out)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

EncodingFormat = Literal["float", "base64"]
MAX_INPUTS = 512
"""Inputs per request (OpenAI allows 2048; a request here is answered in one go, so it stays
small enough to answer within a client's timeout on 2 cores)."""
MAX_BODY_BYTES = 4 * 2**20
"""Request body (at 256 word pieces an input, more text than this is cut anyway)."""


class BadRequest(ValueError):
    """A request the server refuses; `str` says why, `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Embeddings:
    """What the model gives for a request's inputs."""

    vectors: np.ndarray
    """float32, one unit-length row per input, in the inputs' order."""
    tokens: int
    """Word pieces the model read for all inputs ([CLS] and [SEP] included, after the cut)."""
    truncated: int
    """Inputs cut to the model's max_tokens."""


@dataclass(frozen=True)
class EmbeddingRequest:
    inputs: tuple[str, ...]
    encoding_format: EncodingFormat


def parse_request(body: bytes, *, dims: int, max_inputs: int = MAX_INPUTS) -> EmbeddingRequest:
    """The inputs of an OpenAI embeddings body (`input`: a string or a list of strings;
    `encoding_format`: float or base64; `dimensions`, if given, must be the model's). `model` and
    `user` are accepted and not checked: the server runs one model. BadRequest otherwise."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object with an `input` field")
    if "input" not in data:
        raise BadRequest("`input` is missing: give a string or a list of strings")
    raw = data["input"]
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("`input` must be a string or a non-empty list of strings")
    for i, text in enumerate(inputs):
        if not isinstance(text, str):
            what = "token ids" if isinstance(text, (int, list)) else type(text).__name__
            raise BadRequest(f"`input[{i}]` is {what}: this server embeds text only (strings)")
        if not text:
            raise BadRequest(f"`input[{i}]` is an empty string: give text to embed")
    if len(inputs) > max_inputs:
        raise BadRequest(f"{len(inputs)} inputs in one request: at most {max_inputs}")
    encoding: EncodingFormat
    match data.get("encoding_format") or "float":
        case "float":
            encoding = "float"
        case "base64":
            encoding = "base64"
        case other:
            raise BadRequest(f"`encoding_format` {other!r}: expected 'float' or 'base64'")
    wanted = data.get("dimensions")
    if wanted is not None and wanted != dims:
        raise BadRequest(f"`dimensions` {wanted!r}: this model gives {dims} dimensions only")
    if not isinstance(data.get("model", ""), str):
        raise BadRequest("`model` must be a string")
    return EmbeddingRequest(inputs=tuple(inputs), encoding_format=encoding)


def encode_vector(vector: np.ndarray, encoding: EncodingFormat) -> list[float] | str:
    """A vector as OpenAI sends it: a list of floats, or base64 of little-endian float32."""
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector.astype(np.float32)]


def embedding_response(
    vectors: Sequence[np.ndarray], *, model: str, tokens: int, encoding: EncodingFormat
) -> dict[str, Any]:
    """OpenAI's answer: the vectors in input order, and the word pieces read as usage."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, encoding)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def error_body(message: str, status: int) -> dict[str, Any]:
    """OpenAI's error shape."""
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    if status >= 500:
        kind = "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
