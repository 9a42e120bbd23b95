"""Rewrite the code deps of every stage in dvc.yaml from the imports of its module.

A stage's code deps are its own module and every project module it imports, followed
transitively (the same rule tests/integration/test_dvc_yaml.py checks). Data deps (data/,
fixtures/, metrics/) are kept as they are. Run it after changing imports:
`uv run python scripts/sync_dvc_deps.py`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("stages", "bench", "systems", "clients", "schemas")
DATA_PREFIXES = ("data/", "fixtures/", "metrics/")


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
                file = root / (name.replace(".", "/") + ".py")
                rel = file.relative_to(root).as_posix()
                if file.is_file() and rel not in seen:
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


def code_deps(stage: str, root: Path = ROOT) -> list[str]:
    module = root / "stages" / f"{stage.replace('-', '_')}.py"
    return sorted({module.relative_to(root).as_posix()} | project_imports(module, root))


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
    path = ROOT / "dvc.yaml"
    new = sync(path.read_text(encoding="utf-8"))
    if "--check" in sys.argv[1:]:
        sys.exit(0 if new == path.read_text(encoding="utf-8") else 1)
    path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
