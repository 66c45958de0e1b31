"""The package's rooms and floors, computed from the source with ``ast``.

Every import of a project module (at module level or inside a function: both run
sooner or later) goes to the importer's own layer or one below it, and the graph
of imports between modules has no cycle. The layers, bottom to top, are
:data:`LAYERS`; ``orchestration``, ``tasks`` and ``flows`` sit above the whole
library ``fedpipe``, and ``fedpipe_app`` (the command line), the one package that
drives them, sits above everything: the library imports none of the four.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("fedpipe", "orchestration", "tasks", "flows", "fedpipe_app")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("fedpipe.core",),
    ("fedpipe.strategy", "fedpipe.client", "fedpipe.wire"),
    ("fedpipe.config",),
    ("fedpipe.data",),
    ("fedpipe.model",),
    ("fedpipe.federation",),
    ("fedpipe.observe",),
    ("orchestration",),
    ("tasks",),
    ("flows",),
    ("fedpipe_app",),
)
"""Bottom to top; rooms on one floor may import each other (no cycle still)."""

TOP_LEVEL_LIMIT = 10
"""Nine rooms and the package's ``__init__``: ``wire`` (what crosses between a client
and the server: compression, secure aggregation) is the ninth, used by both sides;
the command line is a package of its own, ``fedpipe_app``, outside the library."""


def modules_of(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The project modules ``name`` imports, anywhere in its source.

    ``from a.b import c`` is an import of ``a.b.c`` when that is a module, else
    of ``a.b``; relative imports are resolved against ``name``'s package.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    out = set()
    for target in found:
        # `import a.b.c` also runs a and a.b: the deepest module named is the edge
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the room ``module`` is in (None: not in
    one, e.g. the package root ``fedpipe``)."""
    for index, rooms in enumerate(LAYERS):
        if any(module == room or module.startswith(f"{room}.") for room in rooms):
            return index
    return None


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import from a lower layer to a higher one, as ``a -> b`` lines."""
    bad = []
    for source, targets in sorted(graph.items()):
        low = layer_of(source)
        for target in sorted(targets):
            high = layer_of(target)
            if low is not None and high is not None and high > low:
                bad.append(f"{source} -> {target}")
    return bad


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import graph's cycles: its strongly connected components of two or
    more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def import_graph(
    root: Path = ROOT, script_folders: Iterable[str] = ()
) -> dict[str, set[str]]:
    """The project's import graph; with ``script_folders`` (e.g. ``benchmarks``)
    their modules too, by folder (``benchmarks.bench_scale``), bare imports of a
    sibling resolved (:func:`script_imports`)."""
    modules = modules_of(root, PROJECT_PACKAGES)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    scripts = modules_of(root, script_folders)
    everything = {**modules, **scripts}
    graph.update(
        {name: script_imports(name, path, everything) for name, path in scripts.items()}
    )
    return graph


GRAPH = import_graph()

# ---------------------------------------------------------------- the project


def test_every_room_is_on_a_floor() -> None:
    # a new subpackage of fedpipe must be given its layer here
    rooms = {
        f"fedpipe.{p.name}"
        for p in (ROOT / "fedpipe").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    placed = {room for floor in LAYERS for room in floor}
    assert rooms <= placed, sorted(rooms - placed)
    modules = [m for m in GRAPH if m != "fedpipe"]
    assert [m for m in modules if layer_of(m) is None] == []


def test_no_import_runs_up_a_floor() -> None:
    assert upward_imports(GRAPH) == []


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(GRAPH) == []


def test_the_library_imports_nothing_above_it() -> None:
    # fedpipe stands alone: no Prefect flow or task, no orchestration, no CLI
    above = ("flows", "tasks", "orchestration", "fedpipe_app")
    library = {
        m: t for m, t in GRAPH.items() if m == "fedpipe" or m.startswith("fedpipe.")
    }
    reaching = sorted(
        f"{m} -> {t}"
        for m, ts in library.items()
        for t in ts
        if t.split(".")[0] in above
    )
    assert reaching == []


ARTIFACTS = "artifacts.py"
"""The one module of ``tasks/`` that is not tasks: it builds Prefect artifacts."""


def _is_task(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name) and target.id == "task":
            return True
    return False


def test_tasks_hold_only_prefect_tasks() -> None:
    # a plain function or class a round needs belongs to the library (or to
    # orchestration when it is Prefect's, Dask's or DVC's)
    plain = []
    for path in sorted((ROOT / "tasks").glob("*.py")):
        if path.name in ("__init__.py", ARTIFACTS):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) or (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and not _is_task(node)
            ):
                plain.append(f"{path.name}:{node.name}")
    assert plain == []


def test_the_package_top_level_has_few_entries() -> None:
    entries = sorted(
        p.name for p in (ROOT / "fedpipe").iterdir() if p.name != "__pycache__"
    )
    assert len(entries) <= TOP_LEVEL_LIMIT, entries


# ---------------------------------------------------------------- the checker


def _tree(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    modules = modules_of(tmp_path, ["fedpipe", "fedpipe_app"])
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "fedpipe/__init__.py": "",
            "fedpipe/core/__init__.py": "",
            "fedpipe/core/seeds.py": "def f():\n    from fedpipe.model import zoo\n",
            "fedpipe/model/__init__.py": "",
            "fedpipe/model/zoo.py": "from fedpipe.core import seeds\n",
        },
    )
    assert upward_imports(graph) == ["fedpipe.core.seeds -> fedpipe.model.zoo"]
    assert cycles(graph) == [["fedpipe.core.seeds", "fedpipe.model.zoo"]]


def test_the_checker_resolves_relative_imports(tmp_path: Path) -> None:
    graph = _tree(
        tmp_path,
        {
            "fedpipe/__init__.py": "",
            "fedpipe/data/__init__.py": "",
            "fedpipe/data/a.py": "from .b import x\nfrom . import c\n",
            "fedpipe/data/b.py": "x = 1\n",
            "fedpipe/data/c.py": "import fedpipe_app.cli\n",
            "fedpipe_app/__init__.py": "",
            "fedpipe_app/cli.py": "",
        },
    )
    assert graph["fedpipe.data.a"] == {"fedpipe.data.b", "fedpipe.data.c"}
    assert upward_imports(graph) == ["fedpipe.data.c -> fedpipe_app.cli"]
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("module", "floor"),
    [("fedpipe.core.seeds", 0), ("fedpipe.client.sgd", 1), ("fedpipe_app", 10)],
)
def test_layer_of(module: str, floor: int) -> None:
    assert layer_of(module) == floor


# ---------------------------------------------------------------- scripts

SCRIPT_FOLDERS = ("benchmarks", "scripts")
"""Folders of scripts that import a sibling by its bare name after
``sys.path.insert`` (``from bench_cache import DVC``)."""


def script_imports(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """What a script imports (:func:`imports_of`), a bare module name resolved
    to the file of that name in the script's own folder."""
    folder = name.rpartition(".")[0]
    siblings = {
        m.rpartition(".")[2]: m for m in modules if m.rpartition(".")[0] == folder
    }
    local = {**modules, **{bare: modules[m] for bare, m in siblings.items()}}
    return {siblings.get(t, t) for t in imports_of(name, path, local)}


def test_benchmarks_and_scripts_have_no_import_cycle() -> None:
    assert cycles(import_graph(ROOT, SCRIPT_FOLDERS)) == []


def test_the_checker_resolves_a_bare_import_to_the_sibling(tmp_path: Path) -> None:
    files = {
        "fedpipe/__init__.py": "",
        "fedpipe/core.py": "",
        "benchmarks/a.py": "import sys\nfrom b import f\nimport fedpipe.core\n",
        "benchmarks/b.py": "def f():\n    import a\n",
        "benchmarks/c.py": "import d\n",  # no sibling d: not a project module
        "scripts/d.py": "from a import f\n",  # a is not its sibling
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = {
        m: t
        for m, t in import_graph(tmp_path, SCRIPT_FOLDERS).items()
        if not m.startswith("fedpipe")
    }
    assert graph == {
        "benchmarks.a": {"benchmarks.b", "fedpipe.core"},
        "benchmarks.b": {"benchmarks.a"},
        "benchmarks.c": set(),
        "scripts.d": set(),
    }
    assert cycles(graph) == [["benchmarks.a", "benchmarks.b"]]
