"""The bad-input corpus (scripts/bad_input_corpus.py) through the pure functions.

Every case of the corpus breaks a tiny project the same way the script does, then
goes through what `fedpipe run` calls before any training, in process and without
Prefect or DVC: params loading (fedpipe.config.params), preflight, ingest
(fedpipe.data.sources.ingest) and validation (fedpipe.data.validation.validate_prepared,
with the validate stage's arguments). The message must name what the case names: the
file, the row or the param key. The script runs the same cases through the real
CLI and also checks the exit code, the absence of a traceback and that nothing
versioned was lost (tests/e2e/test_own_data.py runs it on two cases).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from fedpipe.config.params import ParamsError, load_params, sync_round_chain
from fedpipe.data import sources as fdata
from fedpipe.data.ingest import IngestError
from fedpipe.data.preflight import preflight
from fedpipe.data.validation import validate_prepared_dir

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str) -> ModuleType:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))  # the script imports tiny_data beside it
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


corpus = _load("bad_input_corpus")
tiny_data = sys.modules["tiny_data"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The good data of each kind, written once (copied per case)."""
    base = tmp_path_factory.mktemp("bad-input-sources")
    return {
        "images": tiny_data.write_image_folder(base / "images"),
        "table": tiny_data.write_table(base / "table.csv"),
    }


def _project(root: Path, kind: str, sources: dict[str, Path]) -> Path:
    """A project folder with the kind's good data and params (no git, no DVC)."""
    import shutil

    if kind == "images":
        shutil.copytree(sources["images"], root / "data/images")
    else:
        (root / "data").mkdir(parents=True)
        shutil.copy(sources["table"], root / "data/table.csv")
    params = tiny_data.merge(tiny_data.TINY, corpus.KINDS[kind])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sync_round_chain(root / "params.yaml")
    return root


def _what_the_run_says(project: Path) -> tuple[str, str]:
    """(where it stopped, the message) on the way `fedpipe run` goes before
    training: params, preflight, ingest, validation."""
    try:
        params = load_params("params.yaml")
        preflight(params.data, params.federation, params.partition)
    except ParamsError as exc:
        return "params", str(exc)
    prepared = project / "data/prepared"
    try:
        fdata.ingest(params.data, prepared)
    except IngestError as exc:
        return "ingest", str(exc)
    report = validate_prepared_dir(prepared, params.validation)
    return ("passed" if report.success else "validation"), "\n".join(
        report.summary_lines()
    )


# where each case stops: bad params exit 2 before any work; data that cannot be
# ingested as configured, or that fails validation, exits 1
STOPS_AT = {2: ("params",), 1: ("ingest", "validation")}


@pytest.mark.parametrize("name", list(corpus.CASES))
def test_the_message_names_the_file_row_or_key(
    name: str,
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = corpus.CASES[name]
    project = _project(tmp_path / "p", case.kind, sources)
    monkeypatch.chdir(project)  # data.path is relative to the project, as in a run
    case.breaks(project)
    where, message = _what_the_run_says(project)
    assert where in STOPS_AT[case.code], (where, message)
    assert case.expected in message, message


@pytest.mark.parametrize("kind", ["images", "table"])
def test_the_good_projects_pass(
    kind: str,
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The corpus breaks good data: unbroken, the same steps pass."""
    project = _project(tmp_path / "p", kind, sources)
    monkeypatch.chdir(project)
    where, message = _what_the_run_says(project)
    assert where == "passed", message


# ---------------------------------------------------------------- the judge

CASE = corpus.CASES["nan-features"]
KEPT = {"dvc.lock": "a", "models/round-2/weights.npz": "b"}
ERROR = "error: data/prepared: data validation failed: row-5 has NaN"
CLEAN = f"INFO ...\n{ERROR}\n"


def test_judge_passes_a_clean_failure() -> None:
    outcome = corpus.judge("nan-features", CASE, 1, CLEAN, KEPT, dict(KEPT))
    assert outcome.passed, outcome.problems
    assert outcome.message == ERROR


@pytest.mark.parametrize(
    ("code", "stderr", "after", "problem"),
    [
        (0, CLEAN, KEPT, "exit 0, expected 1"),
        (2, CLEAN, KEPT, "exit 2, expected 1"),
        (1, CLEAN.replace("row-5", "a row"), KEPT, "stderr lacks 'row-5'"),
        (1, CLEAN + "Traceback (most recent call last):\n", KEPT, "traceback"),
        (1, "Traceback (most recent call last):\nrow-5\n", KEPT, "no error line"),
        (1, CLEAN, {**KEPT, "dvc.lock": "c"}, "changed: dvc.lock"),
        (1, CLEAN, {"dvc.lock": "a"}, "changed: models/round-2/weights.npz"),
    ],
)
def test_judge_fails_what_the_corpus_must_not_do(
    code: int, stderr: str, after: dict[str, str], problem: str
) -> None:
    outcome = corpus.judge("nan-features", CASE, code, stderr, KEPT, after)
    assert not outcome.passed
    assert any(problem in p for p in outcome.problems), outcome.problems


def test_judge_finds_the_line_naming_the_row() -> None:
    stderr = "error: data/prepared: data validation failed (1 of 12 checks):\n"
    stderr += "FAILED no NaN features: 2 rows (e.g. row-5, row-10)\n"
    outcome = corpus.judge("nan-features", CASE, 1, stderr, KEPT, KEPT)
    assert outcome.message.endswith("(1 of 12 checks):")
    assert outcome.naming == "FAILED no NaN features: 2 rows (e.g. row-5, row-10)"


def test_table_has_a_row_per_case_and_escapes_pipes() -> None:
    ok = corpus.Outcome("a", 1, "error: x | y", "error: x | y", ())
    bad = corpus.Outcome("b", 0, "", "", ("exit 0, expected 2",))
    lines = corpus.table([ok, bad]).splitlines()
    assert lines[0] == (
        "| case | exit | first line of the message | the line naming it | result |"
    )
    assert lines[2] == "| a | 1 | error: x \\| y | (the same) | pass |"
    assert lines[3] == "| b | 0 |  | (the same) | FAIL: exit 0, expected 2 |"
