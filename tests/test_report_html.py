"""`replay report DIR --html`: one self-contained page, checked as text and in headless Chromium."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from replay.report import write_report
from tests.report_results_builder import tier_sweep, write_run

ROOT = Path(__file__).resolve().parents[1]


def test_page_is_self_contained(tmp_path):
    exp = tier_sweep(tmp_path / "exp")
    out = write_report(exp, html=True)
    assert out.html == exp / "report.html"
    page = out.html.read_text()
    svgs = [p for p in out.figures if p.suffix == ".svg"]
    assert svgs and page.count("<svg") == len(svgs)  # every figure inline, as SVG
    assert "<script" not in page and "<link" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched
    assert "figures/" not in page  # no reference to the figure files beside it
    assert "trace sha256" in page and "<table>" in page  # tables and provenance
    assert html.escape((exp / "experiment.toml").read_text().splitlines()[0]) in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # matplotlib's ids made unique per figure


def test_a_runs_own_text_is_shown_as_written_not_rendered(tmp_path):
    # a failure's reason is free text from an engine or a log: markdown in it used to render,
    # so a remote image in it became an <img> the page fetched, and `__init__` turned bold
    exp = tier_sweep(tmp_path / "exp")
    why = "boom in __init__.py: *x* ![i](http://e.example/y.png) <b>tag</b> & [l](http://e.example)"
    write_run(exp, {"host_tier_gib": 5}, 9, summary=None, status="failed", error=why)
    toml = exp / "experiment.toml"
    toml.write_text(toml.read_text() + "# a note with ``` inside\nseed = 1\n")
    out = write_report(exp, html=True)
    page = out.html.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched, nothing linked
    row = next(r for r in page.split("<tr>") if "boom in" in r)
    cell = re.sub(r"</?td>", "", row.split("<td>")[-1].split("</tr>")[0]).strip()
    assert cell == html.escape(why, quote=False)  # the reason, character for character, no tags
    # the experiment file stays in its code block past its own backticks
    block = page.split("<pre><code")[-1].split("</code></pre>")[0]
    assert "```" in block and "seed = 1" in block


# Put first into <head> of a copy of the page: records console errors, failed loads and every
# resource fetched, and each figure's laid-out size, into the DOM that --dump-dom prints.
_CHECK = """<script>
window.__errors = [];
const origError = console.error;
console.error = (...a) => { window.__errors.push(a.join(' ')); origError(...a); };
window.addEventListener('error', e => window.__errors.push(String(e.message || e.target.outerHTML)), true);
window.addEventListener('load', () => {
  const figs = [...document.querySelectorAll('figure.fig')].map(f => {
    const g = f.querySelector('svg, img').getBoundingClientRect();
    const s = getComputedStyle(f);
    return {w: g.width, h: g.height, shown: s.display !== 'none' && s.visibility !== 'hidden'};
  });
  const out = {errors: window.__errors, figures: figs,
               fetched: performance.getEntriesByType('resource').map(r => r.name)};
  const pre = document.createElement('pre');
  pre.id = 'replay-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("chromium not installed: `make setup-chromium` (CI=true runs every test)")
    pytest.skip("chromium not installed (make setup-chromium)")


def _headless(chromium: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
def test_quick_sweep_report_renders_in_chromium(tmp_path):
    chromium = _chromium()
    from replay.sweep.config import load_experiment
    from replay.sweep.runner import run_sweep

    result = run_sweep(
        load_experiment(ROOT / "experiments" / "quick.toml"), results_root=tmp_path, echo=print
    )
    out = write_report(result.exp_dir, html=True)
    assert out.html is not None
    page = out.html.read_text()
    checked = out.html.with_name("report.check.html")
    checked.write_text(page.replace("<head>", "<head>\n" + _CHECK, 1))
    cp = _headless(chromium, "--dump-dom", checked.as_uri())
    m = re.search(r'<pre id="replay-check">(.*?)</pre>', cp.stdout, re.S)
    assert m, cp.stderr[-2000:]
    check = orjson.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert check["errors"] == []
    assert check["fetched"] == []  # no network fetch, not even a local file
    drawn = [p for p in out.figures if p.suffix == ".svg"]
    assert len(check["figures"]) == len(drawn) >= 3
    for fig in check["figures"]:
        assert fig["shown"] and fig["w"] > 200 and fig["h"] > 100, fig
    shot = result.exp_dir / "report.png"
    cp = _headless(chromium, f"--screenshot={shot}", "--window-size=1280,6000", out.html.as_uri())
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", cp.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
