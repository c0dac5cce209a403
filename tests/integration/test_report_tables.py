"""The report's tables are usable in a browser: a click on a header sorts by that column
(numbers by value, intervals by their estimate), the filter box hides non-matching rows, and
the page makes no network request and logs no error (headless Chromium runs the page's own
script; a small test script appended to a copy drives it and writes what it saw)."""

import json
import re
import shutil
import subprocess

import pytest
from report_synth import make_runs

from ddpbench import analysis as A
from ddpbench.report import build as report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")

DRIVER = """<script>
window.addEventListener("load", function () {
  var table = document.getElementById("cells");
  var col = Array.prototype.findIndex.call(table.tHead.rows[0].cells, function (c) {
    return c.textContent.indexOf("throughput") === 0; });
  var values = function () { return Array.prototype.map.call(table.tBodies[0].rows, function (r) {
    return parseFloat(r.cells[col].textContent); }); };
  var before = values();
  table.tHead.rows[0].cells[col].click();
  var asc = values();
  table.tHead.rows[0].cells[col].click();
  var desc = values();
  var box = document.querySelector('input.filter[data-table="cells"]');
  box.value = "ddp"; box.dispatchEvent(new Event("input"));
  var shown = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; });
  var out = document.createElement("pre"); out.id = "probe";
  out.textContent = JSON.stringify({before: before, asc: asc, desc: desc, rows: table.tBodies[0].rows.length,
    shown: shown.length, shown_all_ddp: shown.every(function (r) { return r.textContent.indexOf("ddp") >= 0; })});
  document.body.appendChild(out);
});
</script>"""


def test_tables_sort_and_filter_in_chromium(tmp_path):
    runs = A.load_runs_frame(make_runs())
    html = report.build(report.Inputs(runs, None, None, "t", 50, {"runs": "-"}), tmp_path / "out", pdf=False)
    page = html.read_text()
    assert "<script src" not in page and not re.search(r"""(src|href)=["']https?://""", page)  # self-contained
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", DRIVER + "</body>"))
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)  # fmt: skip
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-3000:]
    seen = json.loads(found.group(1).replace("&quot;", '"'))
    assert seen["before"] != sorted(seen["before"])  # the click has something to do
    assert seen["asc"] == sorted(seen["before"]) and seen["desc"] == sorted(seen["before"], reverse=True)
    assert 0 < seen["shown"] < seen["rows"] and seen["shown_all_ddp"]
    console_errors = [line for line in proc.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert not console_errors, console_errors
