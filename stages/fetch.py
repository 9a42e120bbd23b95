"""fetch: the pinned BEAM parquet into `data/fetch/dataset.parquet`, and the benchmark's pinned
scorer files (judge prompts) into `data/scorer/` (params `judge`); for system replay without a
local `replay.file`, its pinned published file into a cache (schemas/published.py).

The entry point and the stage's only shell: it reads params, makes the downloads through the doors
(clients/hub.py, clients/github.py) and writes the outs; bench/fetch.py's docstring says what is
pinned and how.
"""

from __future__ import annotations

from pathlib import Path

from bench.fetch import FETCH_OUT, fetched_path, pinned_file
from bench.scorer_prompts import scorer_file_path
from clients import github
from clients.files import remove_outputs, write_atomic, write_json
from clients.hub import download_pinned, resolve_endpoint
from schemas.errors import IntegrityError
from schemas.layout import LAYOUT, StageIO
from schemas.params import FetchParams, JudgeParams, Params, Release
from schemas.published import fetched_published_path, hash_command
from stages.common import read_params, run_stage

STAGE_IO = StageIO(outs=(LAYOUT.fetch.dataset, LAYOUT.fetch.scorer, LAYOUT.fetch.protocols))

SCORER_CACHE = Path(".cache/scorer")


def copy_atomic(source: Path, target: Path) -> None:
    """Copy `source` (the cache's symlink is followed) to `target`: never a half-written out."""
    write_atomic(target, source.read_bytes())


def fetch(
    release: Release,
    params: FetchParams,
    out: Path,
    *,
    endpoint: str | None = None,
    cache_dir: Path | None = None,
) -> list[bool]:
    """Put the release's files in the folder `out` (nothing else stays there); per file, True
    when it came from the cache without a request. On a failure no file is left in `out`."""
    remove_outputs(out)
    cached = []
    try:
        for file in release.files:
            source, hit = download_pinned(
                pinned_file(release, file),
                timeout_seconds=params.timeout_seconds,
                endpoint=endpoint,
                cache_dir=cache_dir,
            )
            copy_atomic(source, fetched_path(out, file))
            cached.append(hit)
    except BaseException:
        remove_outputs(out)
        raise
    return cached


def fetch_scorer(
    params: JudgeParams, folder: Path = LAYOUT.fetch.scorer, cache_dir: Path = SCORER_CACHE
) -> list[Path]:
    """The pinned scorer files at `<folder>/<path>`, from the cache or downloaded."""
    written = []
    for pinned in (params.prompts, params.compute_metrics):
        cached = cache_dir / params.scorer_commit / pinned.path
        github.download_pinned(
            base_url=params.base_url,
            repo=params.scorer_repo,
            commit=params.scorer_commit,
            path=pinned.path,
            sha256=pinned.sha256,
            dest=cached,
            timeout_seconds=params.timeout_seconds,
            max_attempts=params.max_attempts,
        )
        target = scorer_file_path(folder, pinned)
        copy_atomic(cached, target)
        written.append(target)
    return written


def fetch_protocol_sources(
    params: JudgeParams, cache_dir: Path = SCORER_CACHE, answer_protocol: str = "beam"
) -> list[Path]:
    """The pinned files (pins.yaml `judge.protocol_sources`) of each scoring protocol params
    `judge.protocols` lists, and of the answer protocol (params `answer.protocol`) unless it is
    the benchmark's own, from the cache or downloaded, at `LAYOUT.fetch.protocol_file`, and
    `sources.json` naming them (written even when there are none, so the out always exists).
    Only the listed ones: a run of beam_code alone needs no other repository."""
    remove_outputs(LAYOUT.fetch.protocols)
    written = []
    names = [*params.protocols, *([answer_protocol] if answer_protocol != "beam" else [])]
    listed = {
        name: params.protocol_sources[name]  # type: ignore[index]
        for name in dict.fromkeys(names)
        if name != "beam_code"
    }
    for name, pin in listed.items():
        for path, sha256 in pin.files.items():
            cached = cache_dir / pin.commit / path
            github.download_pinned(
                base_url=params.base_url,
                repo=pin.repo,
                commit=pin.commit,
                path=path,
                sha256=sha256,
                dest=cached,
                timeout_seconds=params.timeout_seconds,
                max_attempts=params.max_attempts,
            )
            target = LAYOUT.fetch.protocol_file(name, path)
            copy_atomic(cached, target)
            written.append(target)
    sources = {name: pin.model_dump(mode="json") for name, pin in listed.items()}
    write_json(LAYOUT.fetch.protocol_sources, sources)
    return written


def fetch_replay_source(run: Params) -> Path | None:
    """System replay with no local `replay.file`: its pinned published file, downloaded once at
    its pinned commit into the cache (verified against the pinned sha256 before anything is
    kept); None for any other run."""
    source = run.replay.source
    if run.system != "replay" or source is None or run.replay.file is not None:
        return None
    pin = run.published.get(source)
    if pin is None or pin.commit is None:
        return None  # the replay system says what to set, with the params it names
    dest = fetched_published_path(pin.repo, pin.commit, pin.path)
    if pin.sha256 is None:
        raise IntegrityError(
            f"published file {source!r} has no sha256 pinned, so it is not downloaded: get it "
            f"(git clone https://github.com/{pin.repo}; git checkout {pin.commit}), check it, "
            f"print its hash with `{hash_command(Path(pin.path))}` and pin it in pins.yaml "
            f"`published.{source}.sha256`"
        )
    github.download_pinned(
        base_url=run.judge.base_url,
        repo=pin.repo,
        commit=pin.commit,
        path=pin.path,
        sha256=pin.sha256,
        dest=dest,
        timeout_seconds=run.judge.timeout_seconds,
        max_attempts=run.judge.max_attempts,
    )
    return dest


def main() -> None:
    run = read_params()
    release, judge = run.tier_release, run.judge
    endpoint = resolve_endpoint()
    cached = fetch(release, run.fetch, FETCH_OUT, endpoint=endpoint)
    for file, hit in zip(release.files, cached, strict=True):
        origin = "the HF cache (no request)" if hit else endpoint
        print(
            f"fetch: tier {run.tier}: {release.repo_id}@{release.revision}:{file.filename} "
            f"from {origin} -> {fetched_path(FETCH_OUT, file)}"
        )
    for path in fetch_scorer(judge):
        print(f"fetch: scorer file {judge.scorer_repo}@{judge.scorer_commit} -> {path}")
    for path in fetch_protocol_sources(judge, answer_protocol=run.answer.protocol):
        print(f"fetch: scoring protocol file -> {path}")
    published = fetch_replay_source(run)
    if published is not None:
        print(f"fetch: replay source {run.replay.source} -> {published}")


if __name__ == "__main__":
    run_stage(main)
