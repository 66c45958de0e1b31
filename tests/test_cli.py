"""The command line: help, and bad params stopping before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FEDPIPE = str(Path(sys.executable).parent / "fedpipe")


def _project(tmp_path: Path) -> Path:
    subprocess.run(
        [FEDPIPE, "init", "--no-git", str(tmp_path)], check=True, capture_output=True
    )
    return tmp_path


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [FEDPIPE, "--help"], capture_output=True, text=True, check=True
    )
    for command in ("run", "stage", "sync", "init"):
        assert command in out.stdout


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("  clients: 10", "  clinets: 10", "federation.clinets"),
        ("method: iid ", "method: random ", "partition.method"),
        ("alpha: 0.5 ", "alpha: -1 ", "partition.alpha"),
        ("rounds: 10\n", "rounds: 0\n", "federation.rounds"),
        ("  clients: 10", "  clients: 100000", "federation.clients"),
        ("name: small_cnn ", "name: resnet9000 ", "model.name"),
        ("lr: 0.05", "lr: fast", "train.lr"),
    ],
)
def test_bad_params_stop_before_any_work(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    project = _project(tmp_path)
    params = project / "params.yaml"
    text = params.read_text()
    assert old in text
    params.write_text(text.replace(old, new, 1))
    proc = subprocess.run(
        [FEDPIPE, "run", "--no-server-start"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert key in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "data").exists()
    assert not (project / "dvc.lock").exists()


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "params.yaml").write_text("seed: 1\n")
    proc = subprocess.run(
        [FEDPIPE, "init", "--no-git", str(project)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert (project / "params.yaml").read_text() == "seed: 1\n"


def test_no_command_prints_where_to_start(capsys: pytest.CaptureFixture) -> None:
    from fedpipe_app.cli import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert "Start here:" in out and "fedpipe run" in out and "fedpipe doctor" in out
    lines = out.splitlines()
    steps = [line.split()[1] for line in lines if line.startswith("  fedpipe")]
    assert len(steps) == len(set(steps)), f"a command listed twice: {steps}"
    # every command named there exists
    from fedpipe_app.cli import build_parser

    for command in steps:
        build_parser().parse_args([command] if command != "init" else [command, "x"])


def test_every_command_help_ends_with_examples_that_parse() -> None:
    """The examples are real: each one parses with the real parser."""
    import argparse
    import shlex

    from fedpipe_app.cli import EXAMPLES, _with_examples, build_parser

    parser = build_parser()
    _with_examples(parser)
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    for name, sub in subparsers.choices.items():
        assert "examples:" in sub.format_help().split("\n\n")[-1], name
    for command, rows in EXAMPLES.items():
        for example, _ in rows:
            words = shlex.split(example.split("&&")[0])
            if words[0] != "fedpipe":
                continue  # dvc / prefect commands
            args = parser.parse_args(words[1:])
            assert args.command in (None, command) or command == "fedpipe", example


def test_a_missing_project_folder_is_named_without_a_traceback(
    tmp_path: Path,
) -> None:
    """`fedpipe -C FOLDER` with no such folder: one line naming it, exit 2 (it
    was a FileNotFoundError traceback from os.chdir)."""
    missing = tmp_path / "no-such-project"
    proc = subprocess.run(
        [FEDPIPE, "-C", str(missing), "status"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: -C {missing}: No such file or directory")


def test_the_console_script_ends_with_mains_status_and_its_output_flushed(
    tmp_path: Path,
) -> None:
    """The console script ends the process without Python's module teardown
    (`fedpipe_app.cli.entry`); status and output are main's."""
    code = (
        "import sys; sys.argv = ['fedpipe', *sys.argv[1:]];"
        "from fedpipe_app.cli import entry; print('x' * 70000); entry()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("x" * 70000 + "\n")
    assert "Start here:" in proc.stdout  # main's own output, after it
    bad = subprocess.run(
        [sys.executable, "-c", code, "-C", str(tmp_path / "none"), "status"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and "error: -C" in bad.stderr
