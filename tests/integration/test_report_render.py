"""The rendered report in real tools: headless Chromium loads report.html without console
errors or network requests and draws every figure; latexmk compiles report.tex to PDF.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3
in, fd 4 out, NUL-terminated JSON), so no Python dependency and no port are needed.
Skipped with the reason when chromium or latexmk is not installed (Debian: chromium;
texlive-latex-recommended latexmk). Set DDPBENCH_TEST_ARTIFACTS=DIR to keep the screenshot.

Checked as a reader would, on a grid with many series (nine strategies, p = 1, 2, 4, two batch
sizes): every figure's legend has at most ten entries, no text is drawn smaller than 8 px in
Chromium at the size the page shows it, the report's size is printed, and no page of the PDF
(rendered to images with pdftoppm) is blank.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pathlib
import re
import select
import shutil
import subprocess
import time

import numpy as np
import pytest
from report_synth import make_comm, make_runs, make_steps

from ddpbench.report import build as report

MANY = ("single", "ddp", "allreduce", "ddp_fp16", "powersgd", "local_sgd", "zero", "ring_allreduce", "gather_scatter")
MIN_TEXT_PX = 8
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("render")
    runs = make_runs(strategies=MANY, world_sizes=(1, 2, 4), batch_sizes=(32, 64), repeats=2)
    runs.to_csv(tmp / "runs.csv", index=False)
    make_steps(runs[runs["repeat"] == 0], n_steps=6).to_csv(tmp / "steps.csv", index=False)
    make_comm().to_csv(tmp / "comm.csv", index=False)
    argv = ["--runs", str(tmp / "runs.csv"), "--steps", str(tmp / "steps.csv"), "--comm", str(tmp / "comm.csv"),
            "--out", str(tmp / "out"), "--bootstrap", "200", "--study", "sharding"]  # fmt: skip
    if not shutil.which("latexmk"):
        argv.append("--no-pdf")
    assert report.main(argv) == 0
    return tmp / "out"


class DevTools:
    """Minimal Chrome DevTools Protocol client over --remote-debugging-pipe."""

    def __init__(self, user_data_dir: pathlib.Path):
        # The pipe ends are moved above fd 10 first, so dup2 onto 3 and 4 cannot clobber them.
        to_child_r, self._to_child = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe())
        self._from_child, from_child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in os.pipe())

        def wire():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--remote-debugging-pipe", f"--user-data-dir={user_data_dir}", "about:blank"]  # fmt: skip
        self.proc = subprocess.Popen([CHROMIUM, *flags], preexec_fn=wire, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(to_child_r)
        os.close(from_child_w)
        self._id, self._buf, self.events = 0, b"", []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        reply = self._until(lambda m: m.get("id") == self._id, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        seen = next((e for e in self.events if e["method"] == method), None)
        return seen or self._until(lambda m: m.get("method") == method, timeout)

    def _until(self, match, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                if match(msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package: chromium)")
def test_html_loads_in_headless_chromium_and_figures_render(rendered, tmp_path):
    html = rendered / "report.html"
    browser = DevTools(tmp_path / "profile")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)  # fmt: skip
        browser.send("Page.navigate", {"url": html.as_uri()}, session)
        browser.wait_event("Page.loadEventFired")
        sizes = browser.send("Runtime.evaluate", {
            "expression": "Array.from(document.querySelectorAll('figure svg'))"
                          ".map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; })",
            "returnByValue": True}, session)["result"]["value"]  # fmt: skip
        # Per figure: its legend's entries (plots gives them ids ...legend-entry-N) and its smallest text in
        # CSS px as drawn: the font size times the scale from the text's user units to the screen.
        reader = browser.send("Runtime.evaluate", {
            "expression": "Array.from(document.querySelectorAll('figure svg')).map(s => ["
                          "s.closest('figure').id,"
                          "s.querySelectorAll('[id*=\"legend-entry-\"]').length,"
                          "Math.min(...Array.from(s.querySelectorAll('text')).map(t => {"
                          "  const m = t.getScreenCTM(); return parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b); }))])",
            "returnByValue": True}, session)["result"]["value"]  # fmt: skip
        # a study's table fits the page's width (its cells wrap): no sideways scrolling beside its answer
        study_tables = browser.send("Runtime.evaluate", {
            "expression": "Array.from(document.querySelectorAll('section.study .scroll'))"
                          ".map(d => [d.querySelector('table').id, d.scrollWidth, d.clientWidth])",
            "returnByValue": True}, session)["result"]["value"]  # fmt: skip
        height = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": int(min(height, 16000)), "deviceScaleFactor": 1, "mobile": False},
                     session)  # fmt: skip
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
    finally:
        browser.close()

    png = tmp_path / "report.png"
    png.write_bytes(base64.b64decode(shot))
    if os.environ.get("DDPBENCH_TEST_ARTIFACTS"):
        keep = pathlib.Path(os.environ["DDPBENCH_TEST_ARTIFACTS"])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(png, keep / "report_screenshot.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    errors = [e for e in browser.events
              if e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]  # fmt: skip
    assert not errors, errors
    fetched = [e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]
    assert all(u.startswith(("file:", "data:")) for u in fetched), fetched  # self-contained: no network

    n_figures = len(list((rendered / "figures").glob("*.svg")))
    assert len(sizes) == n_figures > 5
    assert all(w > 100 and h > 100 for w, h in sizes), sizes

    print(f"report.html: {html.stat().st_size / 1e6:.2f} MB, {n_figures} figures, "
          f"smallest text {min(px for *_, px in reader):.1f} px, largest legend {max(n for _, n, _ in reader)} entries")
    assert len(reader) == n_figures
    assert len(study_tables) == 1 and all(scroll <= client + 1 for _, scroll, client in study_tables), study_tables
    for fig_id, legend_entries, smallest_px in reader:
        assert 0 < legend_entries <= 10, (fig_id, legend_entries)
        assert smallest_px >= MIN_TEXT_PX, (fig_id, smallest_px)


@pytest.mark.skipif(not shutil.which("latexmk"), reason="latexmk is not installed (Debian: texlive-latex-recommended latexmk)")
def test_pdf_compiles(rendered):
    pdf = rendered / "report.pdf"
    assert pdf.exists() and pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 20_000
    assert "No PDF was made" not in (rendered / "report.html").read_text()


@pytest.mark.skipif(not (shutil.which("latexmk") and shutil.which("pdftoppm")), reason="latexmk or pdftoppm is not installed (Debian: poppler-utils)")
def test_pdf_has_no_blank_page(rendered, tmp_path):
    pdf = rendered / "report.pdf"
    print(f"report.pdf: {pdf.stat().st_size / 1e6:.2f} MB")
    subprocess.run(["pdftoppm", "-gray", "-r", "30", str(pdf), str(tmp_path / "page")], check=True, timeout=120)
    pages = sorted(tmp_path.glob("page*.pgm"))
    assert pages
    for page in pages:
        raw = page.read_bytes()
        # Binary PGM: "P5", width, height, maxval, one whitespace, then the pixels.
        head = re.match(rb"P5\s+(\d+)\s+(\d+)\s+255\s", raw)
        assert head, page
        width, height = int(head[1]), int(head[2])
        pixels = np.frombuffer(raw[head.end() : head.end() + width * height], dtype=np.uint8)
        assert pixels.size == width * height, page
        assert (pixels < 200).mean() > 0.001, f"{page.name} is blank"
