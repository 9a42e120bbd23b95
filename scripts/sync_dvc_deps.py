"""Rewrite the code deps of every stage in dvc.yaml from the imports of its module.

A stage's code is its own module and every project module it imports, followed transitively
(the same rule tests/test_dvc_yaml.py checks), except the models the model door starts by name
(`NOT_DEPS`): the scripted test model and the local models' downloads, build and server. A real
run never executes the test model, and which local model answered is named by params
(`models.<role>.model`) and by the call cache's key (its weights and runtime), so editing a test
rule or a build flag re-runs no locked stage.

dvc.yaml lists that code by its top package folder (`bench`, `clients`, `schemas`, `stages`,
`systems`), so that `dvc exp show` has five dep columns for code instead of one per file.
A folder dep hashes every file DVC does not ignore, so `.dvcignore` keeps out
`__pycache__`, the benchmark scripts' measurements, `NOT_DEPS` and the test model's rules beside the
prompts they read (`scripted_rules.py`, loaded by name by clients/scripted/): `dvcignore_covers`.
Editing any file of a folder re-runs the stages that list it (a stage's own module is no finer
dep: five columns were the point), which the call cache makes cheap.
Data deps (data/, fixtures/, metrics/) are kept as they are. Run it after changing imports:
`uv run python scripts/sync_dvc_deps.py`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("commands", "stages", "bench", "systems", "clients", "schemas")
DATA_PREFIXES = ("data/", "fixtures", "metrics/", "settings.yaml", "pins.yaml")
"""Deps that are no code (data, fixtures, metrics, the run settings, the pins): kept as they are."""
NOT_DEPS = ("clients/scripted", "clients/local_servers/local_model")
"""Modules (and packages) that are no code dep of any stage, nor followed: see the docstring."""


def _has_code(file: Path) -> bool:
    """Whether a module holds more than its docstring (an empty `__init__.py` is no dep)."""
    body = ast.parse(file.read_text(encoding="utf-8")).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def _module_file(name: str, root: Path) -> Path | None:
    """The file of a project module: `a/b.py`, or `a/b/__init__.py` for a package with code."""
    base = root / name.replace(".", "/")
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    init = base / "__init__.py"
    return init if init.is_file() and _has_code(init) else None


def project_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Project files a module imports, followed transitively (relative posix paths)."""
    seen: set[str] = set()
    todo = [path]
    while todo:
        tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] not in PROJECT_PACKAGES:
                    continue
                file = _module_file(name, root)
                if file is None:
                    continue
                rel = file.relative_to(root).as_posix()
                if rel.startswith(NOT_DEPS):
                    continue
                if rel not in seen:
                    seen.add(rel)
                    todo.append(file)
    return seen | package_data(seen, root)


def package_data(modules: set[str], root: Path = ROOT) -> set[str]:
    """The files beside the modules that are not Python (a package's CSS or JavaScript, read
    with importlib.resources): what they hold is in the outs as much as the code is."""
    folders = {(root / rel).parent for rel in modules}
    return {
        path.relative_to(root).as_posix()
        for folder in folders
        if folder != root and (folder / "__init__.py").is_file()
        for path in folder.iterdir()
        if path.is_file() and path.suffix not in (".py", ".pyc")
    }


def code_files(stage: str, root: Path = ROOT) -> list[str]:
    """Every project file a stage's module runs or reads: itself and what it imports."""
    module = root / "stages" / f"{stage.replace('-', '_')}.py"
    return sorted({module.relative_to(root).as_posix()} | project_imports(module, root))


def dep_of(file: str) -> str:
    """The dvc.yaml dep that covers a code file: its top package folder."""
    return file.split("/")[0]


def code_deps(stage: str, root: Path = ROOT) -> list[str]:
    """A stage's code deps as dvc.yaml lists them (see the module docstring)."""
    files = code_files(stage, root)
    return sorted({dep_of(f) for f in files})


DVCIGNORE_NEEDS = (
    "__pycache__/",
    "scripted_rules.py",
    *(f"{d}/" for d in NOT_DEPS),
)
"""The lines .dvcignore must hold for the folder deps to hash only the code a real run runs."""


def dvcignore_covers(root: Path = ROOT) -> list[str]:
    """The lines of `DVCIGNORE_NEEDS` missing from the repo's .dvcignore (empty: all there)."""
    path = root / ".dvcignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [line for line in DVCIGNORE_NEEDS if line not in lines]


def sync(text: str, root: Path = ROOT) -> str:
    """dvc.yaml's text with each stage's code deps replaced (comments and order kept)."""
    out: list[str] = []
    stage: str | None = None
    in_deps = False
    for line in text.splitlines():
        header = re.match(r"^  ([a-z][a-z_-]*):\s*$", line)
        if header:
            stage, in_deps = header.group(1), False
        if stage and re.match(r"^    deps:\s*$", line):
            in_deps = True
            out.append(line)
            continue
        if in_deps:
            item = re.match(r"^      - (\S+)\s*$", line)
            if item:
                if item.group(1).startswith(DATA_PREFIXES):
                    out.append(line)
                continue
            out.extend(f"      - {dep}" for dep in code_deps(stage or "", root))
            in_deps = False
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> None:
    missing = dvcignore_covers()
    if missing:
        sys.exit(f".dvcignore lacks {missing}: add them, or the folder deps hash them too")
    path = ROOT / "dvc.yaml"
    new = sync(path.read_text(encoding="utf-8"))
    if "--check" in sys.argv[1:]:
        sys.exit(0 if new == path.read_text(encoding="utf-8") else 1)
    path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
