"""Your own code, named in ``params.yaml``: ``path/to/file.py:Name`` or ``module:Name``.

``model.name``, ``strategy.name`` and ``client.algorithm`` take either a built-in
name or a reference to an object in the user's project. A file path is relative to
the project root (the folder of ``params.yaml``); ``fedpipe sync`` makes such files
dependencies of the DVC stages that use them, so editing one reruns exactly those
stages and ``dvc.lock`` records its hash.

Every problem is a :class:`~fedpipe.core.errors.ParamsError` naming the key and what was
found, raised when the pipeline starts (the ``init`` stage at the latest).

A file is imported under a generated module name (``fedpipe_user_<stem>_<digest>``)
that no other process can import. For Dask workers, which unpickle jobs holding
the user's classes, :func:`loaded_files` lists what this process imported (name,
reference, source) and :func:`install` makes the same module in a worker from its
source: the code travels with the run, so a worker on another machine, without
the project's files, runs what the run itself loaded.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import linecache
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fedpipe.core import atomic
from fedpipe.core.errors import ParamsError

SEPARATOR = ":"


@dataclass(frozen=True)
class UserFile:
    """A user's file as this process imported it.

    Attributes
    ----------
    module : str
        The generated module name (``fedpipe_user_feddyn_20228ae472a8``).
    target : str
        The file as ``params.yaml`` names it (``examples/feddyn/feddyn.py``).
    path : str
        Where it was read (absolute; for tracebacks on the worker).
    source : bytes
        Its content when it was imported.
    """

    module: str
    target: str
    path: str
    source: bytes


_loaded: dict[str, UserFile] = {}  # module name -> the file (this process)
_installed: dict[str, str] = {}  # target -> module name (made by install)


def is_reference(name: str) -> bool:
    """Whether a ``*.name`` value names user code rather than a built-in."""
    return SEPARATOR in name


def reference_file(name: str) -> Path | None:
    """The project file a reference names (``plugins/m.py:f`` -> ``plugins/m.py``);
    None for a built-in name or a ``module:Name`` reference."""
    if not is_reference(name):
        return None
    target = name.rpartition(SEPARATOR)[0]
    return Path(target) if target.endswith(".py") else None


def load_object(name: str, *, key: str) -> Any:
    """The object a reference names, importing its file or module.

    Parameters
    ----------
    name : str
        ``path/to/file.py:Name`` (relative to the working directory, which is the
        project root) or ``package.module:Name``; ``Name`` may be dotted
        (``Class.method``).
    key : str
        The dotted param key, for messages (``model.name``).

    Raises
    ------
    ParamsError
        The file or module does not exist or fails to import, or has no ``Name``.
    """
    target, _, attr = name.rpartition(SEPARATOR)
    if not target or not attr:
        raise ParamsError(
            f"params.yaml: {key}={name!r} is not a reference; allowed: "
            "path/to/file.py:Name or package.module:Name"
        )
    module = _module(target, key=key, name=name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(n for n in vars(module) if not n.startswith("_"))
            raise ParamsError(
                f"params.yaml: {key}={name!r}: {target} has no {attr!r}; it defines "
                f"{', '.join(found) or 'nothing public'}"
            )
        obj = getattr(obj, part)
    return obj


def _module(target: str, *, key: str, name: str) -> ModuleType:
    if target in _installed:  # a worker: the run's own copy of the file
        return sys.modules[_installed[target]]
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ParamsError(
                f"params.yaml: {key}={name!r}: file {target} not found (paths are "
                f"relative to the project root, {Path.cwd()})"
            )
        return _import_file(path.resolve(), target=target, key=key, name=name)
    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise ParamsError(
            f"params.yaml: {key}={name!r}: cannot import module {target!r} ({exc})"
        ) from None


def _import_file(path: Path, *, target: str, key: str, name: str) -> ModuleType:
    """Import a file as a module of its own, once per path and content."""
    content = path.read_bytes()
    digest = hashlib.md5(content + str(path).encode()).hexdigest()[:12]
    module_name = f"fedpipe_user_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ParamsError(
            f"params.yaml: {key}={name!r}: importing {path.name} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    _loaded[module_name] = UserFile(module_name, target, str(path), content)
    _pickle_by_value(module)
    return module


def loaded_files() -> tuple[UserFile, ...]:
    """The user's files this process imported (in import order)."""
    return tuple(_loaded.values())


def install(file: UserFile) -> ModuleType:
    """Make ``file``'s module in this process (a Dask worker) from its source,
    under the name the run gave it, so that pickles naming it load here; a
    reference to ``file.target`` then resolves to it (not to a file on this
    machine's disk, which may differ or be absent). Once per module name."""
    if file.module not in sys.modules:
        spec = importlib.util.spec_from_loader(file.module, loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        module.__file__ = file.path
        text = file.source.decode("utf-8")
        # inspect.getsource (TensorFlow's autograph) reads the lines from here
        linecache.cache[file.path] = (len(text), None, text.splitlines(True), file.path)
        sys.modules[file.module] = module
        try:
            exec(compile(file.source, file.path, "exec"), module.__dict__)  # noqa: S102
        except BaseException:
            del sys.modules[file.module]
            raise
    _installed[file.target] = file.module
    return sys.modules[file.module]


def _pickle_by_value(module: ModuleType) -> None:
    """Ship the module's code with objects sent to Dask workers, which cannot
    import a module that exists only under a generated name in this process."""
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - cloudpickle comes with Prefect
        return
    cloudpickle.register_pickle_by_value(module)


def load_subclass(name: str, base: type, *, key: str) -> type:
    """A class named by a reference that subclasses ``base``."""
    obj = load_object(name, key=key)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        what = (
            f"class {obj.__name__} (bases: "
            f"{', '.join(b.__name__ for b in obj.__mro__[1:-1]) or 'object'})"
            if isinstance(obj, type)
            else f"a {type(obj).__name__}"
        )
        raise ParamsError(
            f"params.yaml: {key}={name!r} is {what}; allowed: a subclass of "
            f"{base.__module__}.{base.__name__}"
        )
    if getattr(obj, "__abstractmethods__", None):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise ParamsError(
            f"params.yaml: {key}={name!r}: class {obj.__name__} does not implement "
            f"{missing}"
        )
    return obj


# ---------------------------------------------------------------- DVC dependencies

PIPELINE_FILE = "dvc.yaml"
CODE_STAGES = ("init", "round", "partition")
"""The stages whose ``deps`` ``fedpipe sync`` keeps in step with the user's code
(and, for ``partition``, the data file params.yaml names: a natural partition's
mapping of images to clients)."""
FIXED_DEPS = {"partition": ("data/prepared", "reports/validation/summary.json")}
"""A stage's dependencies that ``dvc.yaml`` always lists (the rest of a stage
named here is managed by ``fedpipe sync``); other stages' managed deps are their
``.py`` files."""


def code_files(
    *,
    model: str,
    strategy: str,
    client: str | None = None,
    natural_mapping: str | None = None,
) -> dict[str, list[str]]:
    """The user's code files each stage depends on, from ``model.name``,
    ``strategy.name``, ``client.algorithm`` and ``partition.natural_mapping``.

    The model's file and the strategy's file feed ``init`` (the initial weights and
    server state) and every round; the client algorithm's file (``client.algorithm``,
    or the one a user's strategy names) feeds the rounds only; a natural
    partition's mapping file (``partition.natural_mapping``) feeds ``partition``,
    so editing it reruns the partition as editing code reruns its stages.
    """
    client_ref: Any = client
    if client_ref is None and is_reference(strategy):
        # the user's strategy class (fedpipe.strategy checks it is one when the
        # run is built); its client algorithm may be a reference of its own
        strategy_cls = load_object(strategy, key="strategy.name")
        client_ref = getattr(strategy_cls, "client_algorithm", None)
    # a class object lives in the strategy's own file, which is tracked already
    client_file = reference_file(client_ref) if isinstance(client_ref, str) else None
    files = (reference_file(model), reference_file(strategy))
    both = [_dep_path(p) for p in files if p is not None]
    rounds = both + [_dep_path(client_file)] if client_file is not None else both
    partition = [_dep_path(Path(natural_mapping))] if natural_mapping else []
    return {
        "init": sorted(set(both)),
        "round": sorted(set(rounds)),
        "partition": partition,
    }


def _dep_path(path: Path) -> str:
    """A dependency path as ``dvc.yaml`` lists it: relative to the project root."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def _is_managed(stage: str, dep: Any) -> bool:
    """Whether ``fedpipe sync`` owns ``dep`` of ``stage`` (see FIXED_DEPS)."""
    if not isinstance(dep, str):
        return False
    if stage in FIXED_DEPS:
        return dep not in FIXED_DEPS[stage]
    return dep.endswith(".py")


def _stage_body(stages: Any, name: str) -> Any:
    stage = stages.get(name) if hasattr(stages, "get") else None
    if stage is None:
        return None
    return stage.get("do", stage)  # foreach stages keep their body under "do"


def listed_code_deps(path: Path = Path(PIPELINE_FILE)) -> dict[str, list[str]]:
    """The dependencies ``fedpipe sync`` manages that ``dvc.yaml`` lists for each of
    :data:`CODE_STAGES` (``.py`` files; a partition's mapping file)."""
    import yaml

    stages = (yaml.safe_load(path.read_text()) or {}).get("stages", {})
    out = {}
    for name in CODE_STAGES:
        body = _stage_body(stages, name) or {}
        deps = body.get("deps", []) or []
        out[name] = sorted(d for d in deps if _is_managed(name, d))
    return out


def sync_code_deps(
    files: dict[str, list[str]], path: Path = Path(PIPELINE_FILE)
) -> bool:
    """Make the managed deps of ``dvc.yaml``'s code stages exactly ``files``.

    Every ``.py`` dependency of those stages, and every partition dependency
    besides :data:`FIXED_DEPS`, is managed here (a user's own script dependency
    belongs in a stage of its own). Comments and layout survive
    (round-trip YAML). Returns True when the file changed.
    """
    if listed_code_deps(path) == {k: sorted(v) for k, v in files.items()}:
        return False
    from ruamel.yaml import YAML

    yaml_rt = YAML()
    yaml_rt.preserve_quotes = True
    yaml_rt.width = 4096
    yaml_rt.indent(mapping=2, sequence=4, offset=2)
    doc = yaml_rt.load(path.read_text())
    for name in CODE_STAGES:
        body = _stage_body(doc.get("stages", {}), name)
        if body is None:
            continue
        deps = body.get("deps")
        if deps is None:
            body["deps"] = deps = []
        for dep in [d for d in deps if _is_managed(name, d)]:
            deps.remove(dep)
        deps.extend(files.get(name, []))
    with atomic.writing(path) as tmp, tmp.open("w") as handle:
        yaml_rt.dump(doc, handle)
    return True


def check_code_deps(
    wanted: dict[str, list[str]], path: Path = Path(PIPELINE_FILE)
) -> None:
    """Stop when ``dvc.yaml`` does not track the user code (or the mapping file)
    the params name, ``wanted`` (:func:`code_files`): a stage would read a file
    whose edits DVC cannot see."""
    if not path.is_file():
        return
    if listed_code_deps(path) != wanted:
        files = sorted({f for fs in wanted.values() for f in fs})
        raise ParamsError(
            f"{path}: the stages' code dependencies do not match params.yaml "
            f"(your code and mapping files: {', '.join(files) or 'none'}); run "
            "`fedpipe sync`"
        )
