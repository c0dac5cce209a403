"""The README and docs/ stay true: short README, live links, runnable commands, configs that plan.

- README.md is the newcomer's page: at most 250 lines, with the two Quick-start commands
  (the test one is what .ci/run calls).
- Every relative link in README.md and docs/*.md points to a file that exists (and, with a
  #fragment into a Markdown file, to a heading that exists).
- Every `python -m ddpbench.<module>` (or `torchrun ... -m ddpbench.<module>`) the pages quote
  answers `--help` with exit status 0.
- Every config file the pages show (`--configfile configs/....yaml`, and config.yaml) passes
  a Snakemake dry run.
- The configuration reference in docs/configuration.md is what
  `python -m ddpbench.plan.config_schema --markdown` prints today.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from ddpbench.plan import config_schema

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
QUICK_START = ("bash scripts/main.sh", "bash scripts/test.sh")
MAX_README_LINES = 250

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
MODULE = re.compile(r"-m (ddpbench(?:\.[A-Za-z0-9_]+)+)")
CONFIGFILE = re.compile(r"--configfile\s+(configs/[A-Za-z0-9_./-]+\.ya?ml)")


def _text(page):
    return page.read_text(encoding="utf-8")


def _prose(text):
    """The page without code blocks and inline code (where `[x](y)` is not a link)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page):
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", _text(page)), re.M)
    return {_slug(h) for h in headings}


def _links(page):
    for target in LINK.findall(_prose(_text(page))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        yield target


def _modules():
    found = set()
    for page in PAGES:
        found.update(MODULE.findall(_text(page)))
    return sorted(found)


def _configfiles():
    found = {"config.yaml"}
    for page in PAGES:
        found.update(CONFIGFILE.findall(_text(page)))
    return sorted(found)


def test_readme_is_short_and_has_the_quick_start():
    text = _text(README)
    assert len(text.splitlines()) <= MAX_README_LINES, "README.md is the newcomer's page: move reference to docs/"
    for command in QUICK_START:
        assert command in text, command
    ci = (ROOT / ".ci" / "run").read_text()
    ci_command = [line for line in ci.splitlines() if line.strip() and not line.startswith(("#", "set ", "cd "))][-1]
    assert ci_command.strip() in text, f".ci/run runs {ci_command!r}, which the README must show"


def test_the_pages_are_found_and_link_to_each_other():
    assert {p.name for p in PAGES} >= {"README.md", "configuration.md", "harness.md", "report.md"}
    assert {"docs/configuration.md", "docs/metrics.md", "docs/security.md"} <= set(_links(README))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(page):
    broken = []
    for target in _links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{target}: no heading #{fragment}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_pages_quote_entry_points():
    assert {"ddpbench.launch", "ddpbench.report", "ddpbench.status"} <= set(_modules())


@pytest.fixture(scope="module")
def help_runs():
    """`python -m <module> --help` for every quoted module, started all at once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    procs = {
        module: subprocess.Popen(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for module in _modules()
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("module", _modules())
def test_quoted_module_answers_help(help_runs, module):
    proc = help_runs[module]
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"python -m {module} --help exited {proc.returncode}:\n{out[-2000:]}"
    assert "usage" in out.lower()


@pytest.mark.slow
@pytest.mark.parametrize("configfile", _configfiles())
def test_shown_config_plans(tmp_path, configfile):
    """`snakemake -n` with the config a page shows, in a scratch folder (like tests/workflow)."""
    assert (ROOT / configfile).is_file(), f"the docs show {configfile}, which does not exist"
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    cmd = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(tmp_path),
        *(["--configfile", str(ROOT / configfile)] if configfile != "config.yaml" else []),
        "-n", "--quiet", "rules",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"snakemake -n with {configfile}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def test_configuration_reference_is_current():
    """docs/configuration.md holds what `python -m ddpbench.plan.config_schema --markdown` prints."""
    text = _text(ROOT / "docs" / "configuration.md")
    assert config_schema.render_markdown().strip() in text, (
        "docs/configuration.md's reference is stale: paste `python -m ddpbench.plan.config_schema --markdown` over it"
    )
