"""The house plan: no file imports a file that imports it back, and no folder grows too big."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("air_skills", "autoresearch", "mcp_server")
MAX_MODULES_PER_FOLDER = 16


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module of ours this file imports, anywhere in it (inside functions and
    TYPE_CHECKING blocks too): ``from pkg import mod`` counts as importing ``pkg.mod``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(path, name, known) for name, path in mods.items()}


def test_no_file_imports_a_file_that_imports_it_back() -> None:
    graph = _graph()
    pairs = sorted(
        (a, b)
        for a, deps in graph.items()
        for b in deps
        if a < b
        and a in graph.get(b, set())
        and not b.startswith(a + ".")
        and not a.startswith(b + ".")
    )
    assert pairs == [], f"files importing each other: {pairs}"


def test_bench_files_do_not_import_each_other_back() -> None:
    bench = REPO / "bench"
    names = {p.stem for p in bench.glob("*.py")}
    graph = {
        p.stem: {m.split(".")[0] for m in _imports(p, p.stem, names)} for p in bench.glob("*.py")
    }
    pairs = sorted((a, b) for a, deps in graph.items() for b in deps if a < b and a in graph[b])
    assert pairs == [], f"bench files importing each other: {pairs}"


def test_no_source_folder_holds_more_than_about_15_modules() -> None:
    crowded = {
        str(folder.relative_to(REPO)): n
        for pkg in PACKAGES
        for folder in [REPO / pkg, *(p for p in (REPO / pkg).rglob("*") if p.is_dir())]
        if (n := len([f for f in folder.glob("*.py") if f.name != "__init__.py"]))
        > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}, f"folders over {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_every_subpackage_says_what_it_holds() -> None:
    silent = [
        str(init.relative_to(REPO))
        for pkg in PACKAGES
        for init in (REPO / pkg).rglob("__init__.py")
        if ast.get_docstring(ast.parse(init.read_text())) is None
    ]
    assert silent == [], f"packages without a docstring: {silent}"
