"""The sweep's pure parts: grid expansion, naming, --grid union, the table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedpipe.config.params import ParamsError
from fedpipe_app.experiments.sweep import (
    abbreviations,
    centralized_args,
    check_name,
    default_name,
    expand,
    layer_divergence,
    load_grid_file,
    mean_std,
    parse_axes,
    plan,
    point_ids,
    progress_line,
    run_row,
    table,
    table_markdown,
)

DEFAULTS = {"model": {"depth": 2, "width": 32, "kernel_size": 3}, "seed": 7}


def test_axes_are_read_as_yaml_in_dvc_syntax() -> None:
    axes = parse_axes(
        ["model.depth=1,2,4", "train.lr=0.1", "model.hidden=[32,32],[64]"]
    )
    assert axes == {
        "model.depth": [1, 2, 4],
        "train.lr": [0.1],
        "model.hidden": [[32, 32], [64]],
    }


@pytest.mark.parametrize("arg", ["model.depth", "1bad=2", "round_chain.1=0"])
def test_a_bad_axis_names_the_argument(arg: str) -> None:
    with pytest.raises(ParamsError, match=r"^-S "):
        parse_axes([arg])


def test_the_axes_make_a_cartesian_product_in_order() -> None:
    keys, points = expand(parse_axes(["model.depth=1,2,4", "model.width=32,256"]))
    assert keys == ["model.depth", "model.width"]
    assert [(p["model.depth"], p["model.width"]) for p in points] == [
        (1, 32), (1, 256), (2, 32), (2, 256), (4, 32), (4, 256),
    ]  # fmt: skip


def test_grids_are_a_union_with_shared_points_once_and_defaults_filled() -> None:
    grids = {
        "depth-width": {"model.depth": [1, 4], "model.width": [32, 256]},
        "kernel": {"model.depth": [1, 4], "model.kernel_size": [3, 5]},
    }
    keys, points = expand({}, grids, defaults=DEFAULTS)
    assert keys == ["model.depth", "model.width", "model.kernel_size"]
    as_tuples = [tuple(p[k] for k in keys) for p in points]
    # (1, 32, 3) and (4, 32, 3) are in both grids (width and kernel defaulted)
    assert as_tuples == [
        (1, 32, 3), (1, 256, 3), (4, 32, 3), (4, 256, 3), (1, 32, 5), (4, 32, 5),
    ]  # fmt: skip


def test_cli_axes_cross_every_grid_and_win_over_it() -> None:
    grids = {"a": {"model.depth": [1, 2]}, "b": {"model.width": [8], "train.lr": [1]}}
    cli = parse_axes(["train.lr=0.1,0.2"])
    keys, points = expand(cli, grids, defaults=DEFAULTS)
    lrs = [(p["model.depth"], p["model.width"], p["train.lr"]) for p in points]
    assert lrs == [
        (1, 32, 0.1), (1, 32, 0.2), (2, 32, 0.1), (2, 32, 0.2), (2, 8, 0.1),
        (2, 8, 0.2),
    ]  # fmt: skip


def test_grid_file(tmp_path: Path) -> None:
    path = tmp_path / "design.yaml"
    path.write_text(
        "base:\n  federation.rounds: 30\n"
        "grids:\n  d:\n    model.depth: [1, 2]\n    model.width: 64\n"
    )
    base, grids = load_grid_file(path)
    assert base == {"federation.rounds": 30}
    assert grids == {"d": {"model.depth": [1, 2], "model.width": [64]}}


@pytest.mark.parametrize(
    "text", ["grid:\n  a: {x: [1]}\n", "grids: [1, 2]\n", "base: 3\n", "a: [\n"]
)
def test_a_bad_grid_file_is_one_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "design.yaml"
    path.write_text(text)
    with pytest.raises(ParamsError, match=r"^--grid "):
        load_grid_file(path)


def test_abbreviations_are_short_and_unique() -> None:
    short = abbreviations(
        ["model.depth", "model.width", "train.lr", "train.local_steps", "a.width",
         "partition.method", "personalization.method"]
    )  # fmt: skip
    assert short == {
        "model.depth": "d",
        "model.width": "mw",
        "train.lr": "lr",
        "train.local_steps": "lo",
        "a.width": "aw",
        "partition.method": "pam",
        "personalization.method": "pem",
    }


def test_point_ids_name_the_values_and_never_collide() -> None:
    keys = ["model.depth", "train.lr"]
    points = [
        {"model.depth": 4, "train.lr": 0.1},
        {"model.depth": 4, "train.lr": "0.1"},
        {"model.depth": None, "train.lr": 1e-3},
    ]
    ids = point_ids(keys, points)
    assert ids[0].startswith("d4-l0.1-") and ids[1].startswith("d4-l0.1-")
    assert len(set(ids)) == 3 and ids[2] == "dnull-l0.001"
    assert point_ids([], [{}]) == ["all"]


def test_runs_seed_by_seed_named_from_the_varying_keys() -> None:
    keys, points = expand(parse_axes(["model.depth=1,2", "federation.rounds=3"]))
    runs = plan("depth", keys, points, [0, 1])
    assert [r.name for r in runs] == [
        "depth-d1-s0", "depth-d2-s0", "depth-d1-s1", "depth-d2-s1",
    ]  # fmt: skip
    assert runs[3].overrides == {"model.depth": 2, "federation.rounds": 3, "seed": 1}
    assert default_name(["model.depth", "model.width"], None) == "depth-width"
    assert default_name(["model.depth"], "designs/deeper.yaml") == "deeper"


@pytest.mark.parametrize("name", ["a b", "-x", "a..b", "a/b", ""])
def test_a_name_that_cannot_name_an_experiment_is_refused(name: str) -> None:
    with pytest.raises(ParamsError, match="--name"):
        check_name(name)


def test_the_one_step_control_is_large_batch_sgd() -> None:
    assert centralized_args(rounds=8, clients=5, batch_size=32, local_steps=None) == []
    assert centralized_args(rounds=8, clients=5, batch_size=32, local_steps=2) == [
        "--steps", "16", "--batch-size", "160",
    ]  # fmt: skip


def test_layer_divergence_is_the_mean_over_rounds_in_model_order() -> None:
    records = [
        {"layers": [{"name": "conv1", "divergence": 0.2},
                    {"name": "bn", "kind": "norm", "divergence": 9.0},
                    {"name": "out", "divergence": 0.4}]},
        {"layers": [{"name": "conv1", "divergence": 0.4},
                    {"name": "out", "divergence": None}]},
    ]  # fmt: skip
    assert layer_divergence(records) == [
        ["conv1", pytest.approx(0.3)],
        ["out", 0.4],
    ]


def _rows() -> list[dict]:
    keys, points = expand(parse_axes(["model.depth=1,2"]))
    runs = plan("t", keys, points, [0, 1, 2])
    accs = {("d1", 0): 0.9, ("d1", 1): 0.8, ("d1", 2): 0.7, ("d2", 0): 0.5}
    rows = []
    for run in runs:
        if (run.point.id, run.seed) not in accs:
            continue
        acc = accs[(run.point.id, run.seed)]
        rows.append(
            run_row(
                run,
                summary={"global": {"accuracy": acc, "loss": 1.0}},
                central={"global": {"accuracy": 0.95}},
                layers=[["a", 0.1], ["b", 0.3]],
                seconds=10.0,
            )
        )
    return rows


def test_the_table_is_mean_and_sample_std_over_seeds() -> None:
    entries = table(_rows(), ["model.depth"])
    first, second = entries
    assert (first["point"], first["model.depth"], first["n"]) == ("d1", 1, 3)
    assert first["accuracy_mean"] == pytest.approx(0.8)
    assert first["accuracy_std"] == pytest.approx(0.1)  # n - 1
    assert first["gap_mean"] == pytest.approx(0.15)
    assert first["mean_divergence_mean"] == pytest.approx(0.2)
    assert second["n"] == 1 and second["accuracy_std"] is None
    text = table_markdown(entries, ["model.depth"])
    assert "| 1 | 3 | 0.8000 ± 0.1000 |" in text
    assert "| 2 | 1 | 0.5000 | 1.0000 | 0.9500 | 0.4500 |" in text


def test_mean_std_skips_missing_values() -> None:
    assert mean_std([]) == (None, None)
    mean, std = mean_std([1.0, None, 3.0])
    assert mean == 2.0 and std == pytest.approx(math.sqrt(2))


def test_progress_line() -> None:
    row = _rows()[0]
    keys, points = expand(parse_axes(["model.depth=1,2"]))
    run = plan("t", keys, points, [0])[0]
    line = progress_line(7, 30, run, row, 720)
    assert (
        line
        == "[7/30] d1 seed 0: acc 0.900, central 0.950, gap 0.050, 10 s; ETA 12 min"
    )


def test_results_files_skip_a_line_cut_by_a_kill(tmp_path: Path) -> None:
    from fedpipe_app.experiments.sweeprun import ROWS, write_results

    keys, points = expand(parse_axes(["model.depth=1,2"]))
    runs = plan("t", keys, points, [0, 1, 2])
    rows = _rows()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / ROWS).write_text(text + '{"run": "t-d2-s1", "poi')
    write_results(tmp_path, runs, keys)
    csv_rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert csv_rows[0].startswith("run,point,model.depth,seed,accuracy,")
    assert [r.split(",")[0] for r in csv_rows[1:]] == [
        "t-d1-s0", "t-d2-s0", "t-d1-s1", "t-d1-s2",
    ]  # fmt: skip
    layers = json.loads((tmp_path / "layers.json").read_text())
    assert layers[0]["settings"] == {"model.depth": 1}
    assert layers[0]["layers"] == [["a", 0.1], ["b", 0.3]]
    assert "| 1 | 3 | 0.8000 ± 0.1000 |" in (tmp_path / "table.md").read_text()


def test_plot_lines_never_join_points_that_differ_beyond_x() -> None:
    from fedpipe_app.experiments.sweepplot import _series, layer_curves

    rows = [
        {"point": p, "model.depth": d, "model.width": w, "model.kernel_size": k,
         "n": 2.0, "gap_mean": g, "gap_std": 0.01}
        for p, d, w, k, g in [("a", 1.0, 8.0, 3.0, 0.1), ("b", 2.0, 8.0, 3.0, 0.2),
                              ("c", 1.0, 8.0, 5.0, 0.3), ("d", 1.0, 32.0, 3.0, 0.4)]
    ]  # fmt: skip
    series = _series(rows, x="model.depth", y="gap", hue="model.width")
    assert series == {
        "model.width=8, model.kernel_size=3": [(1.0, 0.1, 0.01), (2.0, 0.2, 0.01)],
        "model.width=8, model.kernel_size=5": [(1.0, 0.3, 0.01)],
        "model.width=32, model.kernel_size=3": [(1.0, 0.4, 0.01)],
    }
    entries = [
        {"settings": {"model.depth": 2}, "layers": [["a", 0.1], ["b", 0.3]]},
        {"settings": {"model.depth": 2}, "layers": [["a", 0.3], ["b", 0.5]]},
        {"settings": {"model.depth": 3}, "layers": [["a", 1.0], ["b", 1.0], ["c", 1]]},
    ]
    curves = layer_curves(entries, "model.depth")
    assert curves == {"2": [pytest.approx(0.2), pytest.approx(0.4)], "3": [1.0] * 3}


def test_a_metric_against_a_metric_is_a_scatter_with_both_error_bars(
    tmp_path: Path,
) -> None:
    import matplotlib.image

    from fedpipe_app.experiments.sweepplot import plot_metric

    (tmp_path / "table.csv").write_text(
        "point,model.depth,n,gap_mean,gap_std,mean_divergence_mean,mean_divergence_std\n"
        "d2,2,3,0.01,0.002,0.2,0.01\n"
        "d8,8,3,0.05,0.01,0.4,0.02\n"
    )
    path = plot_metric(tmp_path, x="mean_divergence", y="gap", hue="model.depth")
    assert path.name == "gap-by-mean_divergence.png"
    assert matplotlib.image.imread(path).shape[2] in (3, 4)
    with pytest.raises(ParamsError, match="--y accuracy_mean"):
        plot_metric(tmp_path, x="mean_divergence", y="accuracy")


ROOT = Path(__file__).resolve().parents[1]


def test_a_bad_point_exits_2_naming_the_key_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpipe_app.cli import main

    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    args = ["-C", str(tmp_path), "sweep", "--dry-run", "-S", "train.lr=0.1,-1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: -S: train.lr: "), err
    assert err[0].endswith("(sweep point l-1)")
    assert main(["-C", str(tmp_path), "sweep", "-S", "model.depthh=1,2"]) == 2
    assert "model.depthh" in capsys.readouterr().err
    table = [
        "sweep",
        "--dry-run",
        "-S",
        "data.source=table",
        "-S",
        "data.label_column=y",
    ]
    missing = [*table, "-S", "data.path=data/a.csv,does/not/exist.csv"]
    (tmp_path / "data").mkdir()
    (tmp_path / "data/a.csv").write_text("x,y\n1,0\n")
    assert main(["-C", str(tmp_path), *missing]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.path='does/not/exist.csv' does not exist" in err
    assert main(["-C", str(tmp_path), *table, "-S", "data.path=data/a.csv"]) == 0
    assert not (tmp_path / "sweeps").exists()


def test_dry_run_lists_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpipe_app.cli import main

    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    design = tmp_path / "design.yaml"
    design.write_text(
        "base: {federation.rounds: 3}\n"
        "grids:\n  a: {model.depth: [1, 2]}\n  b: {model.depth: [2], train.lr: [0.5]}\n"
    )
    args = ["-C", str(tmp_path), "sweep", "--grid", str(design), "--seeds", "2"]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "every run (the grid's base): federation.rounds=3"
    assert out[1].startswith("design-d1-l0.05-s0: model.depth=1, train.lr=0.05")
    assert out[-1] == "6 runs (3 points x 2 seeds)"


@pytest.mark.parametrize(
    ("design", "summary"),
    [
        ("design.yaml", "42 runs (14 points x 3 seeds)"),
        ("design-resnet.yaml", "30 runs (10 points x 3 seeds)"),
    ],
)
def test_the_documented_deeper_models_designs_are_valid_sweeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], design: str, summary: str
) -> None:
    """docs/deeper-models' grid files, as its commands run them: every point's
    settings pass params.yaml's checks, and the run counts the doc states."""
    from fedpipe_app.cli import main

    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    grid = ROOT / "docs" / "deeper-models" / design
    args = ["-C", str(tmp_path), "sweep", "--grid", str(grid), "--seeds", "3"]
    assert main([*args, "--centralized", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == summary
    assert all(line.endswith(("seed=0", "seed=1", "seed=2")) for line in out[1:-1])


def test_the_legend_of_a_sweep_plot_never_covers_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deeper-models table: 7 lines with long labels (every other swept key)."""
    import shutil

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fedpipe_app.experiments.sweepplot import plot_metric

    shutil.copy(ROOT / "docs/deeper-models/results/table.csv", tmp_path)
    saved: list[Figure] = []
    real_savefig = Figure.savefig

    def keep(fig: Figure, *args, **kwargs):  # type: ignore[no-untyped-def]
        saved.append(fig)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    plot_metric(tmp_path, x="model.depth", y="gap", hue="model.width")
    (fig,) = saved
    (ax,) = fig.axes
    canvas = FigureCanvasAgg(fig)  # (closed: drawn again on a fresh canvas)
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 7
    box = legend.get_window_extent(renderer)
    assert not box.overlaps(ax.get_window_extent(renderer))
    assert not box.overlaps(ax.xaxis.label.get_window_extent(renderer))


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs Linux /proc")
def test_a_killed_sweeps_orphan_with_no_pid_file_is_ended(tmp_path: Path) -> None:
    """A sweep killed between starting a run's command and writing its pid file
    left the command running, holding DVC's lock: the resumed sweep's runs in
    that slot were refused (CI, 2026-12-07). The slot's leftovers are found by
    working directory; a process there that is not fedpipe's or DVC's is not."""
    import subprocess
    import sys

    from fedpipe_app.experiments.sweeprun import PID_FILE, _end_leftover

    slot = tmp_path / "slot-0"
    (slot / ".dvc" / "tmp").mkdir(parents=True)
    sleep = "import time; time.sleep(120)"
    orphan = subprocess.Popen(
        [sys.executable, "-c", sleep, "fedpipe_app.cli", "run"],
        cwd=slot, start_new_session=True,
    )  # fmt: skip
    other = subprocess.Popen(
        [sys.executable, "-c", sleep], cwd=slot, start_new_session=True
    )
    try:
        assert not (slot / PID_FILE).exists()
        _end_leftover(slot)
        assert orphan.wait(timeout=20) == -9
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs Linux /proc")
def test_a_leftover_save_is_let_finish_not_killed(tmp_path: Path) -> None:
    """A `dvc exp save` killed half-way left the slot's dvc.lock empty and the
    resumed sweep's runs there failed: a leftover save ends by itself."""
    import subprocess
    import sys

    from fedpipe_app.experiments.sweeprun import _end_leftover

    slot = tmp_path / "slot-0"
    (slot / ".dvc" / "tmp").mkdir(parents=True)
    save = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(1.5)", "dvc", "exp", "save"],
        cwd=slot, start_new_session=True,
    )  # fmt: skip
    try:
        assert _end_leftover(slot) is True
        assert save.wait(timeout=20) == 0
    finally:
        save.kill()
        save.wait()


def test_a_slot_that_held_a_half_finished_run_is_made_anew(tmp_path: Path) -> None:
    from fedpipe_app.experiments.sweeprun import RUN_MARKER, _git, open_slot

    def git(where: Path, *args: str) -> str:
        return _git(where, *args)

    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "params.yaml").write_text("seed: 1\n")
    (root / ".gitignore").write_text("/.dvc/tmp\n/dvc.lock\n")
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = git(root, "rev-parse", "HEAD").strip()
    (root / "dvc.lock").write_text("schema: '2.0'\n")
    slot = root / ".dvc" / "tmp" / "sweeps" / "t" / "slot-0"
    assert open_slot(root, base, slot, root / ".dvc" / "cache") is False
    assert (slot / "dvc.lock").read_text() == "schema: '2.0'\n"
    (slot / "dvc.lock").write_text("")  # what a killed save left
    (slot / "half-written").write_text("x")
    (slot / RUN_MARKER).parent.mkdir(parents=True, exist_ok=True)
    (slot / RUN_MARKER).write_text("t-a-s0\n")
    assert open_slot(root, base, slot, root / ".dvc" / "cache") is True
    assert (slot / "dvc.lock").read_text() == "schema: '2.0'\n"
    assert not (slot / "half-written").exists()
    assert git(slot, "rev-parse", "HEAD").strip() == base
