"""Token counting with tiktoken's cl100k_base, offline, from the tokenizer files litellm bundles.

Every stage and the estimator count tokens through this one function, so chunk sizes, slice
metrics and estimates agree. litellm itself is not imported (that is slow and only
clients/llm/litellm_door.py may do it); we only point tiktoken at litellm's bundled cache folder.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.errors import BeamError

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "cl100k_base"


def _bundled_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


@lru_cache(maxsize=4)
def _encoding(name: str) -> tiktoken.Encoding:
    import tiktoken

    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        folder = _bundled_tokenizer_dir()
        if folder is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises plain errors (network, unknown name)
        raise BeamError(
            f"tokenizer {name!r} could not be loaded offline ({exc}); "
            "it is read from litellm's bundled tokenizer files: run `make setup`"
        ) from exc


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Number of tokens in `text` (special-token markers are counted as plain text)."""
    return len(_encoding(encoding).encode(text, disallowed_special=()))


def split_tokens(text: str, size: int, encoding: str = DEFAULT_ENCODING) -> list[str]:
    """Cut `text` into pieces of at most `size` tokens (a last resort for very long sentences)."""
    enc = _encoding(encoding)
    ids = enc.encode(text, disallowed_special=())
    return [enc.decode(ids[i : i + size]) for i in range(0, len(ids), size)]
