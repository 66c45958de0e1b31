"""fedpipe.observe.report: the run's HTML page from synthetic run files (contract
formats)."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
import yaml
from matplotlib.transforms import Bbox
from report_fixtures import FINDINGS, relock, write_run

from fedpipe.core.jsonio import write_json
from fedpipe.observe import report
from fedpipe.observe.doctor import codes
from fedpipe.observe.report import (
    SECTION_TITLES,
    build_report,
    labels_svg,
    read_health,
    read_history,
    read_label_counts,
    read_lineage,
    render_findings,
    run_doctor,
    write_report,
)


def _section(page: str, key: str) -> str:
    """The HTML of section ``key``."""
    match = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert match, f"no section {key}"
    return match.group(1)


@pytest.fixture
def no_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behave as a fedpipe without fedpipe.observe.doctor, whether or not it exists."""
    monkeypatch.setitem(sys.modules, "fedpipe.observe.doctor", None)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_run(
        tmp_path_factory.mktemp("run"), git=shutil.which("git") is not None
    )


@pytest.fixture(scope="module")
def full_page(run_dir: Path) -> str:
    return build_report(run_dir, findings=FINDINGS)


# ---------------------------------------------------------------- whole page


def test_every_section_present_in_order(full_page: str) -> None:
    headings = re.findall(r"<h2>(.*?)</h2>", full_page)
    assert headings == [report.html.escape(t) for t in SECTION_TITLES.values()]


def test_complete_run_has_six_plots_and_no_missing_notes(full_page: str) -> None:
    plots = re.findall(r'<figure class="plot" data-plot="(\w+)"><svg ', full_page)
    assert plots == ["metrics", "divergence", "norms", "labels", "skew", "wire"]
    assert 'class="missing"' not in full_page


def test_page_is_self_contained(full_page: str) -> None:
    # nothing fetched: no external scripts, stylesheets, images or fonts
    assert "<link" not in full_page
    assert "<script" not in full_page
    refs = re.findall(r'(?:src|href)="([^"]*)"', full_page)
    # in-page anchors, SVG marker references, and colorbars matplotlib embeds as PNG
    assert refs and all(r.startswith(("#", "data:image/png;base64,")) for r in refs)
    assert re.findall(r"url\((?!#)", full_page) == []  # only in-page clip paths
    assert "@import" not in full_page


def test_svg_plots_keep_text_and_no_timestamp(full_page: str) -> None:
    metrics = _section(full_page, "metrics")
    assert ">round</text>" in metrics  # svg.fonttype none: labels are text
    assert "<dc:date>" not in full_page


def test_final_round_table_shows_local_mean_and_std(
    run_dir: Path, full_page: str
) -> None:
    last = json.loads((run_dir / "metrics/rounds/round-4.json").read_text())
    metrics = _section(full_page, "metrics")
    assert "Final round (4)" in metrics
    assert f"{last['global']['loss']:.4f}" in metrics
    assert (
        f"{last['local']['accuracy']:.4f} ± {last['local_std']['accuracy']:.4f}"
        in metrics
    )


def test_divergence_heatmap_names_every_layer_and_round(full_page: str) -> None:
    divergence = _section(full_page, "divergence")
    for label in (
        "0 dense (dense)",
        "1 batch_normalization (norm)",
        "2 dense_1 (dense)",
    ):
        assert f">{label}</text>" in divergence
    assert all(f">{k}</text>" in divergence for k in range(1, 5))


def test_label_section_shows_skew_and_counts(run_dir: Path, full_page: str) -> None:
    labels = _section(full_page, "labels")
    skew = json.loads((run_dir / "reports/partition/skew.json").read_text())
    assert f"label_skew {skew['label_skew']:.3f}" in labels
    assert "reports/partition/class_counts.csv" in labels


def test_label_section_says_which_columns_feature_skew_changed(
    tmp_path: Path,
) -> None:
    from fedpipe.observe.report import _labels_section
    from fedpipe.observe.runfiles import load_run

    root = write_run(tmp_path / "run", git=False)
    path = root / "reports/partition/skew.json"
    skew = json.loads(path.read_text())
    skew["feature_skew_columns"] = {
        "skewed": ["size"],
        "left_alone": {"color": "categorical", "smoker": "boolean"},
    }
    write_json(path, skew)
    labels = _labels_section(load_run(root))
    assert (
        "feature skew changed 1 numeric/date column(s) (size); left alone: color "
        "(categorical), smoker (boolean)" in labels
    )
    assert "{" not in labels.split("</p>")[0]  # the figures line holds no dict


def test_lineage_shows_commit_data_and_final_model(
    run_dir: Path, full_page: str
) -> None:
    lineage = _section(full_page, "lineage")
    final = re.search(r"<h4>Final model</h4>(.*?)</table>", lineage, re.S).group(1)
    assert "models/round-4/weights.npz" in final
    assert f"{104:032x}" in final  # the lock's md5 of round 4's weights
    assert "models/round-3" not in final
    data = re.search(r"<h4>Data</h4>(.*?)</table>", lineage, re.S).group(1)
    assert "data/partition/manifest.json" in data and f"{2:032x}" in data
    assert "<code>partition.alpha</code></td><td><code>0.3</code>" in lineage
    assert "round_chain" not in lineage
    if shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(run_dir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert f"<code>{head}</code> (work tree clean)" in lineage


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repository_before_its_first_commit_is_not_told_to_git_init(
    tmp_path: Path, no_doctor: None
) -> None:
    """``fedpipe init`` makes a git repository with no commit: the report said
    "no git commit recorded (run `git init` and commit)" there."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    lineage = _section(build_report(tmp_path), "lineage")
    assert "git init" not in lineage, lineage
    assert "no git commit yet" in lineage and "git commit -m" in lineage
    bare = tmp_path / "elsewhere"  # outside any repository: git init is the advice
    bare.mkdir()
    elsewhere = _section(build_report(bare), "lineage")
    if subprocess.run(["git", "-C", str(bare), "rev-parse"], check=False).returncode:
        assert "not a git repository" in elsewhere


# ---------------------------------------------------------------- missing inputs


def test_empty_directory_gives_a_note_per_section(
    tmp_path: Path, no_doctor: None
) -> None:
    page = build_report(tmp_path)
    notes = {
        key: re.findall(r'class="missing">(.*?)</p>', _section(page, key))
        for key in SECTION_TITLES
    }
    assert "run `fedpipe run`" in notes["metrics"][0]
    assert notes["divergence"][0].startswith(
        "not recorded: no metrics/health/round-K.json"
    )
    assert notes["norms"] == notes["divergence"]
    assert "run `fedpipe stage partition`" in notes["labels"][0]
    assert notes["doctor"] == [
        "doctor not available (this fedpipe has no fedpipe.observe.doctor)"
    ]
    assert len(notes["lineage"]) == 3  # git, dvc.lock, params.yaml
    assert "<svg" not in page


def test_run_without_health_records_keeps_the_other_plots(tmp_path: Path) -> None:
    write_run(tmp_path)
    shutil.rmtree(tmp_path / "metrics/health")
    page = build_report(tmp_path, findings=[])
    assert re.findall(r'data-plot="(\w+)"', page) == [
        "metrics", "labels", "skew", "wire",
    ]  # fmt: skip
    assert "rerun the rounds" in _section(page, "norms")


def test_history_csv_is_used_when_round_files_are_gone(tmp_path: Path) -> None:
    write_run(tmp_path)
    shutil.rmtree(tmp_path / "metrics/rounds")
    history, source = read_history(tmp_path)
    assert source == "metrics/history.csv"
    assert list(history["round"]) == [1, 2, 3, 4]
    assert "from metrics/history.csv" in build_report(tmp_path, findings=[])


def test_round_files_sort_numerically(tmp_path: Path) -> None:
    write_run(tmp_path, rounds=11)
    history, _ = read_history(tmp_path)
    assert list(history["round"]) == list(range(1, 12))


def test_label_counts_fall_back_to_the_manifest(tmp_path: Path) -> None:
    write_run(tmp_path)
    from_csv, _ = read_label_counts(tmp_path)
    shutil.rmtree(tmp_path / "reports/partition")
    from_manifest, source = read_label_counts(tmp_path)
    assert source == "data/partition/manifest.json"
    # counts hidden under the minimum-count rule make a column text in the CSV
    assert from_manifest.astype(str).equals(from_csv.astype(str))


def test_label_counts_and_plot_show_class_names(tmp_path: Path) -> None:
    write_run(tmp_path, n_classes=3)
    shutil.rmtree(tmp_path / "reports/partition")
    names = ["cat", "dog", "with_mask"]
    schema = {"classes": [0, 1, 2], "class_names": names}
    write_json(tmp_path / "data/prepared/schema.json", schema)
    counts, _ = read_label_counts(tmp_path)
    assert list(counts.columns)[3:] == names
    assert all(f">{name}<" in labels_svg(counts) for name in names)


def test_unreadable_file_is_named_and_other_sections_render(tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / "metrics/health/round-2.json").write_text("{not json")
    relock(tmp_path)  # recorded so (a record changed since is not read at all)
    page = build_report(tmp_path, findings=[])
    assert "could not read the health records: JSONDecodeError" in _section(
        page, "divergence"
    )
    assert re.findall(r'data-plot="(\w+)"', page) == [
        "metrics", "labels", "skew", "wire",
    ]  # fmt: skip


def test_null_values_do_not_break_plots(tmp_path: Path) -> None:
    write_run(tmp_path)
    path = tmp_path / "metrics/health/round-3.json"
    record = json.loads(path.read_text())
    for layer in record["layers"]:
        layer["divergence"] = None
    record["clients"][0]["update_norm"] = None
    path.write_text(json.dumps(record))
    rounds = tmp_path / "metrics/rounds/round-3.json"
    summary = json.loads(rounds.read_text())
    summary["global"]["auc"] = None
    rounds.write_text(json.dumps(summary))
    relock(tmp_path)
    page = build_report(tmp_path, findings=[])
    assert re.findall(r'data-plot="(\w+)"', page) == [
        "metrics",
        "divergence",
        "norms",
        "labels",
        "skew",
        "wire",
    ]


# ---------------------------------------------------------------- plot layout


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Bbox, Bbox]]:
    """Every text and legend the plots draw: its text (``"legend"``), its box and
    the box of its figure, as drawn (in the same units)."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    boxes: list[tuple[str, Bbox, Bbox]] = []

    def recording(draw):  # type: ignore[no-untyped-def]
        def recorded(self, renderer) -> None:  # type: ignore[no-untyped-def]
            draw(self, renderer)
            if self.get_visible() and (isinstance(self, Legend) or self.get_text()):
                what = "legend" if isinstance(self, Legend) else self.get_text()
                figure = self.get_figure(root=True).bbox.frozen()
                boxes.append((what, self.get_window_extent(renderer), figure))

        return recorded

    monkeypatch.setattr(Text, "draw", recording(Text.draw))
    monkeypatch.setattr(Legend, "draw", recording(Legend.draw))
    return boxes


@pytest.mark.parametrize(
    ("rounds", "n_clients", "n_classes", "spread"),
    [
        (4, 4, 5, False),  # the fixture's run
        (40, 35, 20, False),  # 35 client rows, a 20-class legend, every 2nd round named
        (25, 3, 20, False),  # a 20-class legend taller than 3 clients' bars need
        (12, 12, 10, True),  # the most clients a legend names; norms on a log scale
    ],
)
def test_plots_draw_every_text_and_legend_inside_the_figure(
    tmp_path: Path,
    drawn: list[tuple[str, Bbox, Bbox]],
    rounds: int,
    n_clients: int,
    n_classes: int,
    spread: bool,
) -> None:
    write_run(tmp_path, rounds=rounds, n_clients=n_clients, n_classes=n_classes)
    history, _ = read_history(tmp_path)
    counts, _ = read_label_counts(tmp_path)
    health = read_health(tmp_path)
    if spread:  # norms over 11 decades: tick labels 10^k in mathtext
        for record in health:
            for client in record["clients"]:
                client["update_norm"] *= 10.0 ** client["client"]
    plots = {
        "metrics": lambda: report.metrics_svg(history),
        "divergence": lambda: report.divergence_svg(health),
        "norms": lambda: report.norms_svg(health),
        "labels": lambda: labels_svg(counts),
    }
    for name, plot in plots.items():
        drawn.clear()
        plot()
        assert drawn, name
        outside = [
            (what, [round(float(v), 1) for v in box.extents], figure.bounds)
            for what, box, figure in drawn
            if box.x0 < figure.x0 - 0.1
            or box.y0 < figure.y0 - 0.1
            or box.x1 > figure.x1 + 0.1
            or box.y1 > figure.y1 + 0.1
        ]
        assert outside == [], name


def test_the_page_is_built_with_the_garbage_collector_paused(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    metrics_svg = report.metrics_svg

    def watched(history):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return metrics_svg(history)

    monkeypatch.setattr(report, "metrics_svg", watched)
    assert gc.isenabled()
    build_report(run_dir, findings=[])
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        build_report(run_dir, findings=[])
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()

    def failing(history):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    monkeypatch.setattr(report, "metrics_svg", failing)
    with pytest.raises(RuntimeError, match="boom"):
        build_report(run_dir, findings=[])
    assert gc.isenabled()


# ---------------------------------------------------------------- findings


def test_findings_keep_order_severity_and_escape_text() -> None:
    html = render_findings(FINDINGS)
    assert html.index(codes.LOSS_RISING_ACCURACY_HOLDS) < html.index("nonfinite-update")
    assert "1 warning, 1 error" in html
    assert '<span class="badge error">error</span>' in html
    assert "Client 1 sent &lt;NaN&gt; weights" in html and "<NaN>" not in html
    assert '<div class="rounds">rounds 2-4</div>' in html  # runfiles.rounds_text
    assert "Fix: lower train.lr (e.g. 0.01)" in html
    side = render_findings([{**FINDINGS[0], "side": "client training"}])
    assert '<div class="side">Side: client training</div>' in side


def test_no_findings_and_no_doctor_are_told_apart() -> None:
    assert "found nothing to report" in render_findings([])
    assert "doctor not available" in render_findings(None, "doctor not available (x)")


def test_missing_doctor_module(tmp_path: Path, no_doctor: None) -> None:
    assert run_doctor(tmp_path) == (
        None,
        "doctor not available (this fedpipe has no fedpipe.observe.doctor)",
    )


@dataclass(frozen=True)
class _Finding:  # the contract's Finding, as fedpipe.observe.doctor defines it
    code: str
    severity: str
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    rounds: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _doctor_module(diagnose) -> types.ModuleType:  # type: ignore[no-untyped-def]
    module = types.ModuleType("fedpipe.observe.doctor")
    module.diagnose = diagnose  # type: ignore[attr-defined]
    return module


def test_doctor_findings_are_called_with_root_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []

    def diagnose(root: Path) -> list[_Finding]:
        seen.append(root)
        return [_Finding(**f) for f in FINDINGS]

    monkeypatch.setitem(sys.modules, "fedpipe.observe.doctor", _doctor_module(diagnose))
    page = build_report(tmp_path)
    assert seen == [tmp_path]
    assert "Global loss rises while accuracy holds" in _section(page, "doctor")


def test_failing_doctor_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def diagnose(root: Path) -> list:
        raise RuntimeError("no rounds")

    monkeypatch.setitem(sys.modules, "fedpipe.observe.doctor", _doctor_module(diagnose))
    assert run_doctor(tmp_path) == (None, "doctor failed: RuntimeError: no rounds")


# ---------------------------------------------------------------- lineage, writing, CLI


def test_lineage_without_git_or_lock(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("seed: 1\n")
    lineage = read_lineage(tmp_path)
    assert lineage["params"] == {"seed": 1}
    assert lineage["outs"] is None
    assert lineage["commit"] is None  # tmp_path is in no git repository


def test_lineage_data_is_the_data_the_run_read(tmp_path: Path) -> None:
    """A table project: "Data" lists data.path (ingest's dependency) and the data
    stages' outputs, not the demo's data/raw/mnist5k.parquet that dvc.lock still
    holds from an earlier run on the demo data (issue 37)."""
    from fedpipe.observe.report import render_lineage

    (tmp_path / "params.yaml").write_text(
        "data:\n  source: table\n  path: data/table.csv\n"
    )
    lock = {
        "schema": "2.0",
        "stages": {
            "mnist5k": {
                "cmd": "fedpipe stage mnist5k",
                "outs": [{"path": "data/raw/mnist5k.parquet", "md5": "a" * 32}],
            },
            "ingest": {
                "cmd": "fedpipe stage ingest",
                "deps": [{"path": "data/table.csv", "md5": "b" * 32, "size": 99}],
                "outs": [{"path": "data/prepared", "md5": "c" * 32 + ".dir"}],
            },
        },
    }
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    page = render_lineage(read_lineage(tmp_path))
    data = page.split("<h4>Data</h4>")[1].split("</table>")[0]
    assert "data/table.csv" in data and "b" * 32 in data
    assert "data/prepared" in data and "mnist5k" not in data


def test_write_report_default_path(run_dir: Path, tmp_path: Path) -> None:
    out = write_report(run_dir, findings=[])
    assert out == run_dir / "reports/report.html"
    assert out.read_text().startswith("<!DOCTYPE html>")
    custom = write_report(tmp_path, Path("a/b.html"), findings=None)
    assert custom == tmp_path / "a/b.html" and custom.is_file()


def test_cli_report_prints_the_path(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("seed: 3\n")  # no plots: a fast process
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedpipe_app.cli",
            "-C",
            str(tmp_path),
            "report",
            "--out",
            "r.html",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str((tmp_path / "r.html").resolve())
    assert (
        "<code>seed</code></td><td><code>3</code>" in (tmp_path / "r.html").read_text()
    )


def test_lineage_waits_for_lock_ready_and_reads_dvc_lock_after_it(
    run_dir: Path, tmp_path: Path
) -> None:
    """``fedpipe run`` builds the page while its last dvc.lock records are being
    written; the lineage reads dvc.lock only after ``lock_ready`` (issue 36,
    defect 6), and a record that failed fails the report."""
    from fedpipe.observe.runfiles import load_run

    project = shutil.copytree(run_dir, tmp_path / "p")
    run = load_run(project)  # read before the last record lands
    lock = project / "dvc.lock"
    recorded = lock.read_text()
    landed = recorded.replace(f"{104:032x}", f"{999:032x}")  # round 4, rewritten
    assert landed != recorded
    order: list[str] = []

    def lock_ready() -> None:
        order.append("lock_ready")
        lock.write_text(landed)

    page = build_report(project, findings=[], run=run, lock_ready=lock_ready)
    final = re.search(
        r"<h4>Final model</h4>(.*?)</table>", _section(page, "lineage"), re.S
    ).group(1)
    assert order == ["lock_ready"]
    assert f"{999:032x}" in final and f"{104:032x}" not in final

    def failed() -> None:
        raise RuntimeError("recording round@4 in dvc.lock failed")

    with pytest.raises(RuntimeError, match="round@4"):
        build_report(project, findings=[], run=run, lock_ready=failed)
