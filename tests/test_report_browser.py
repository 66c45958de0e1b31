"""The run report in a real browser: headless Chromium (Debian's ``chromium``).

The page is opened from ``file://`` with the network stack watched: it must load
without console errors, exceptions or failed requests, fetch nothing but itself
(and its inline ``data:`` images), and every plot must have been laid out with a
non-zero size and drawn content.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from headless_chromium import Page, chromium_path
from report_fixtures import FINDINGS, write_run

from fedpipe.observe.report import SECTION_TITLES, write_report

CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install -y chromium; .ci/run does)",
)

_INSPECT = """
(async () => {
  const plots = [];
  for (const fig of document.querySelectorAll("figure.plot")) {
    const svg = fig.querySelector("svg");
    const box = svg.getBoundingClientRect();
    const drawn = svg.getBBox();
    const images = [];
    for (const image of svg.querySelectorAll("image")) {
      const img = new Image();
      img.src = image.getAttribute("xlink:href") || image.getAttribute("href");
      try { await img.decode(); } catch (e) { /* naturalWidth stays 0 */ }
      images.push(img.naturalWidth);
    }
    plots.push({name: fig.dataset.plot, width: box.width, height: box.height,
                drawnWidth: drawn.width, drawnHeight: drawn.height,
                shapes: svg.querySelectorAll("path, use, text").length, images});
  }
  return {
    plots,
    headings: [...document.querySelectorAll("h2")].map(h => h.textContent),
    missing: [...document.querySelectorAll("p.missing")].map(p => p.textContent),
    findings: document.querySelectorAll("li.finding").length,
  };
})()
"""


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    with Page(CHROMIUM) as opened:
        yield opened


def _open(page: Page, path: Path, shot: Path) -> dict:
    url = path.resolve().as_uri()
    page.open(url)
    seen = page.evaluate(_INSPECT)
    page.screenshot(shot)  # for a person looking at a failure; not asserted
    assert page.errors() == []
    assert {u for u in page.requested_urls() if not u.startswith("data:")} == {url}
    return seen


def test_full_report_renders_every_plot(page: Page, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", git=True)
    out = write_report(run, findings=FINDINGS)
    seen = _open(page, out, tmp_path / "full.png")
    assert seen["headings"] == list(SECTION_TITLES.values())
    assert seen["missing"] == []
    assert seen["findings"] == len(FINDINGS)
    assert [p["name"] for p in seen["plots"]] == [
        "metrics",
        "divergence",
        "norms",
        "labels",
        "skew",
        "wire",
    ]
    for plot in seen["plots"]:
        assert plot["width"] > 100 and plot["height"] > 100, plot
        assert plot["drawnWidth"] > 0 and plot["drawnHeight"] > 0, plot
        assert plot["shapes"] > 10, plot
        assert all(width > 0 for width in plot["images"]), plot
    heatmap = next(p for p in seen["plots"] if p["name"] == "divergence")
    assert heatmap["images"]  # its colorbar is an embedded PNG that must decode


def test_empty_project_report_renders_notes(page: Page, tmp_path: Path) -> None:
    out = write_report(tmp_path, findings=None)
    seen = _open(page, out, tmp_path / "empty.png")
    assert seen["headings"] == list(SECTION_TITLES.values())
    assert seen["plots"] == []
    assert len(seen["missing"]) >= len(SECTION_TITLES)


def test_the_check_sees_errors(page: Page, tmp_path: Path) -> None:
    # guards the harness: a broken page must not pass as clean
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<html><body><img src="missing.png">'
        "<script>console.error('boom'); notDefined();</script></body></html>"
    )
    page.open(bad.as_uri())
    errors = page.errors()
    assert any("console.error: boom" in e for e in errors)
    assert any("notDefined is not defined" in e for e in errors)
    assert any("ERR_FILE_NOT_FOUND" in e for e in errors)
    assert (tmp_path / "missing.png").as_uri() in page.requested_urls()
