"""The bad-input corpus: broken data and params through the real `fedpipe run`.

Each case copies a good tiny project that has already run (an image folder or a
CSV table with a natural-client column), breaks it the way people's data and
params break, and runs `fedpipe run`. A case passes when

- the run exits with the case's exit code (2: bad params, before any work; 1: data
  that cannot be ingested as configured, or that fails validation),
- its error names what is wrong: the file, the row or the param key (the case's
  expected text is in stderr),
- no traceback follows the error line,
- the last good run lost nothing: `dvc.lock`, the models, `data/prepared` and the
  partition manifest are byte for byte as before.

Prints a Markdown table (case, exit code, first line of the message, the line
naming the file, row or key, pass/fail) and exits 1 if any case fails; each
case's stderr is kept in the work folder (``CASE.stderr.txt``). Without
--projects the two good projects are made and run first; each case then costs one
`fedpipe run` (the whole corpus: about 8 minutes on 2 busy cores).

    python scripts/bad_input_corpus.py [--cases NAME ...] [--list]
        [--projects images=DIR table=DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from tiny_data import TINY, merge, write_image_folder, write_table

BIN = Path(sys.executable).parent
FEDPIPE = str(BIN / "fedpipe")
RUN = [FEDPIPE, "run", "--no-report"]
# what a failed run must leave as it was (besides dvc.lock)
KEPT = ("models/round-*/weights.npz", "data/prepared/*", "data/partition/manifest.json")
KINDS = {
    "images": {
        "data": {"source": "images", "path": "data/images", "image_size": [32, 32]},
        "model": {"name": "seed_cnn"},
        "federation": {
            "clients": 2, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1,
        },
        "partition": {"min_samples": 10},
        "validation": {"min_rows": 50},
    },
    "table": {
        "data": {
            "source": "table", "path": "data/table.csv", "client_column": "hospital",
        },
        "model": {"name": "mlp"},
        "federation": {
            "clients": 3, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1,
        },
        "partition": {"method": "natural", "min_samples": 10},
        "validation": {"min_rows": 50},
    },
}  # fmt: skip


# ---------------------------------------------------------------- the breaks


def set_params(project: Path, **sections: dict) -> None:
    """Update ``params.yaml`` sections, keeping the generated round chain."""
    path = project / "params.yaml"
    head, marker, chain = path.read_text().partition("# --- generated")
    params = yaml.safe_load(head)
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False) + "\n" + marker + chain)


def _edit_table(project: Path, edit: Callable) -> None:
    import pandas as pd

    path = project / "data/table.csv"
    edit(pd.read_csv(path)).to_csv(path, index=False)


def truncated_png(project: Path) -> None:
    target = project / "data/images/with_mask/img_000.png"
    target.write_bytes(target.read_bytes()[:60])


def text_file_in_class_folder(project: Path) -> None:
    (project / "data/images/without_mask/notes.txt").write_text("not an image\n")


def empty_class_folder(project: Path) -> None:
    (project / "data/images/no_images_yet").mkdir()


def mixed_image_shapes_strict(project: Path) -> None:
    set_params(project, validation={"mixed_sizes": "fail"})


def empty_folder(project: Path) -> None:
    (project / "data/empty").mkdir()
    set_params(project, data={"path": "data/empty"})


def missing_data_path(project: Path) -> None:
    set_params(project, data={"path": "data/nowhere.csv"})


def missing_label_column(project: Path) -> None:
    _edit_table(project, lambda df: df.rename(columns={"label": "target"}))


def _nan_in_f3(df):  # type: ignore[no-untyped-def]
    df.loc[[4, 9], "f3"] = float("nan")
    return df


def nan_features(project: Path) -> None:
    _edit_table(project, _nan_in_f3)


def _text_in_f1(df):  # type: ignore[no-untyped-def]
    df = df.astype({"f1": object})
    df.loc[11, "f1"] = "n/a (sensor off)"
    return df


def strings_in_numeric_column(project: Path) -> None:
    _edit_table(project, _text_in_f1)


def single_class(project: Path) -> None:
    _edit_table(project, lambda df: df.assign(label=0))


def _label_7(df):  # type: ignore[no-untyped-def]
    df.loc[6, "label"] = 7
    return df


def label_outside_declared_classes(project: Path) -> None:
    _edit_table(project, _label_7)
    set_params(project, data={"num_classes": 3})


def _half_label(df):  # type: ignore[no-untyped-def]
    df["label"] = df["label"].astype(float)
    df.loc[6, "label"] = 0.5
    return df


def fractional_label(project: Path) -> None:
    _edit_table(project, _half_label)


def privacy_delta_too_large(project: Path) -> None:
    # client-level DP on 3 clients: delta must be below 1/3
    set_params(project, privacy={"mechanism": "central", "delta": 0.5})


def privacy_with_robust_aggregator(project: Path) -> None:
    set_params(project, privacy={"mechanism": "central"}, strategy={"name": "krum"})


def label_not_in_data_classes(project: Path) -> None:
    set_params(project, data={"classes": ["0", "1"]})


@dataclass(frozen=True)
class Case:
    """One broken input: how to break a good project and what the run must say.

    ``force`` runs with ``--force``: DVC hashes files, so an empty folder alone
    changes no dependency (a first run on such a folder behaves the same).
    """

    kind: str
    breaks: Callable[[Path], None]
    expected: str
    code: int
    force: bool = False


CASES = {
    "truncated-png": Case("images", truncated_png, "with_mask/img_000.png", 1),
    "text-file-in-class-folder": Case(
        "images", text_file_in_class_folder, "without_mask/notes.txt", 1
    ),
    "empty-class-folder": Case(
        "images", empty_class_folder, "no_images_yet", 1, force=True
    ),
    "mixed-image-shapes-strict": Case(
        "images", mixed_image_shapes_strict, "differ in size", 1
    ),
    "empty-folder": Case("images", empty_folder, "data.path", 1),
    "missing-data-path": Case(
        "table", missing_data_path, "data.path='data/nowhere.csv' does not exist", 2
    ),
    "missing-label-column": Case("table", missing_label_column, "data.label_column", 1),
    "nan-features": Case("table", nan_features, "row-5", 1),
    "strings-in-numeric-column": Case("table", strings_in_numeric_column, "row-12", 1),
    "single-class": Case("table", single_class, "at least 2 classes", 1),
    "label-outside-declared-classes": Case(
        "table", label_outside_declared_classes, "row-7", 1
    ),
    # the value the file holds, not the -1 it is stored as
    "fractional-label": Case(
        "table",
        fractional_label,
        "1 row has a problem (e.g. \"label '0.5' is not an integer class index",
        1,
    ),
    "label-not-in-data-classes": Case(
        "table",
        label_not_in_data_classes,
        "data.classes: data.label_column 'label' in data/table.csv holds '2' (at row-",
        1,
    ),
    "privacy-delta-too-large": Case(
        "table", privacy_delta_too_large, "privacy.delta=0.5 must be < 1/", 2
    ),
    "privacy-with-robust-aggregator": Case(
        "table",
        privacy_with_robust_aggregator,
        "privacy.mechanism=central does not fit strategy.name='krum'",
        2,
    ),
}


# ---------------------------------------------------------------- running


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def good_project(path: Path, kind: str, env: dict[str, str]) -> Path:
    """A new tiny project of ``kind`` ("images" or "table"), committed and run."""
    if kind == "images":
        write_image_folder(path / "data/images")
    else:
        write_table(path / "data/table.csv")
    _run([FEDPIPE, "init", str(path)], Path.cwd(), env)
    raw = yaml.safe_load((path / "params.yaml").read_text())
    raw.pop("round_chain")
    params = merge(merge(raw, TINY), KINDS[kind])
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _run([FEDPIPE, "sync"], path, env)
    _run(["git", "add", "-A"], path, env)
    _run(["git", "commit", "-qm", "tiny experiment"], path, env)
    _run(RUN, path, env)
    return path


def kept(project: Path) -> dict[str, str]:
    """md5 of everything a failed run must leave as it was, dvc.lock included."""
    files = [project / "dvc.lock"]
    files += [p for pattern in KEPT for p in sorted(project.glob(pattern))]
    return {
        str(p.relative_to(project)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in files
    }


@dataclass(frozen=True)
class Outcome:
    """What one case's run did, and what was wrong with it (nothing: it passed).

    ``message`` is the first line of the error; ``naming`` the first line of
    stderr that holds the case's expected text (the same line, or the summary
    line below it that names the file or row)."""

    case: str
    code: int
    message: str
    naming: str
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def first_error_line(stderr: str) -> str:
    """The first line of the error a person reads (``error: ...``)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or [""])[0]


def naming_line(stderr: str, expected: str) -> str:
    """The first line of ``stderr`` that holds ``expected`` ("" if none does)."""
    return next((ln.strip() for ln in stderr.splitlines() if expected in ln), "")


def judge(
    name: str,
    case: Case,
    code: int,
    stderr: str,
    before: dict[str, str],
    after: dict[str, str],
) -> Outcome:
    """Check one run against its case: exit code, message, no traceback, nothing
    versioned lost."""
    problems = []
    if code != case.code:
        problems.append(f"exit {code}, expected {case.code}")
    if case.expected not in stderr:
        problems.append(f"stderr lacks {case.expected!r}")
    if "error:" not in stderr:
        problems.append("no error line")
    elif "Traceback" in stderr.split("error:")[-1]:
        problems.append("traceback after the error")
    changed = sorted(
        k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
    )
    if changed:
        problems.append("changed: " + ", ".join(changed[:5]))
    return Outcome(
        name,
        code,
        first_error_line(stderr),
        naming_line(stderr, case.expected),
        tuple(problems),
    )


def run_case(name: str, good: Path, work: Path, env: dict[str, str]) -> Outcome:
    """Copy ``good``, break it as case ``name`` says, run it and judge the run."""
    case = CASES[name]
    project = work / name
    shutil.copytree(good, project, symlinks=True)
    before = kept(project)
    case.breaks(project)
    args = RUN + (["--force"] if case.force else [])
    proc = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True)
    (work / f"{name}.stderr.txt").write_text(proc.stderr)  # for a person to read
    return judge(name, case, proc.returncode, proc.stderr, before, kept(project))


def table(outcomes: list[Outcome]) -> str:
    """The Markdown table of the outcomes."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [
        "| case | exit | first line of the message | the line naming it | result |",
        "|---|---:|---|---|---|",
    ]
    for o in outcomes:
        result = "pass" if o.passed else "FAIL: " + "; ".join(o.problems)
        naming = "(the same)" if o.naming == o.message else cell(o.naming)
        rows.append(
            f"| {o.case} | {o.code} | {cell(o.message)} | {naming} | {cell(result)} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), metavar="NAME")
    parser.add_argument("--list", action="store_true", help="print the case names")
    parser.add_argument(
        "--projects", nargs="+", default=[], metavar="KIND=DIR",
        help="good projects that already ran (images=DIR, table=DIR); never changed",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, help="where the cases run (kept)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(f"{name} ({c.kind})" for name, c in CASES.items()))
        return 0
    names = args.cases or list(CASES)
    work = args.work or Path(tempfile.mkdtemp(prefix="bad-input-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="3")
    good = {k: Path(v).resolve() for k, v in (p.split("=", 1) for p in args.projects)}
    for kind in sorted({CASES[n].kind for n in names} - set(good)):
        good[kind] = good_project(work / f"good-{kind}", kind, env)
    outcomes = [run_case(n, good[CASES[n].kind], work, env) for n in names]
    print(table(outcomes))
    print(f"cases ran in {work} (stderr of each: CASE.stderr.txt)", file=sys.stderr)
    failed = [o.case for o in outcomes if not o.passed]
    print(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} cases pass", end="")
    print(f"; failed: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
