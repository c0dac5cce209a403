"""The README and docs/ stay true: short README, live links, runnable commands, configs that plan.

- README.md is the newcomer's page: at most 250 lines, with the two Quick-start commands
  (the test one is what .ci/run calls).
- Every relative link in README.md and docs/*.md points to a file that exists (and, with a
  #fragment into a Markdown file, to a heading that exists).
- Every `ddpbench VERB` (= `python -m ddpbench VERB`) and `torchrun ... -m ddpbench.<module>`
  the pages quote answers `--help` with exit status 0.
- Every config file the pages show (`--configfile configs/....yaml`, and config.yaml) passes
  a Snakemake dry run.
- The configuration reference in docs/configuration.md is what
  `ddpbench config-schema --markdown` prints today.
- report/workflow.rst (`snakemake --report`'s description) names the verbs the rules
  call, the schema's repeat designs and the interval methods analysis.intervals computes.
- Every study has a preset naming it, every preset's study exists, and the README and
  docs/report.md point to configs/studies/ rather than list the studies.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from ddpbench import cli
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
VERB = re.compile(r"(?<![\w.-])ddpbench ([a-z][a-z-]*)")  # `ddpbench VERB`, `python -m ddpbench VERB`
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


def _verbs():
    found = set()
    for page in PAGES:
        found.update(VERB.findall(_text(page)))
    return sorted(found & set(cli.SUBCOMMANDS))


def _commands():
    """Every command the pages quote, as `python -m` arguments: modules, and verbs after ddpbench."""
    return [(m,) for m in _modules()] + [("ddpbench", v) for v in _verbs()]


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
    assert {"launch", "report", "status", "aggregate", "compare"} <= set(_verbs())
    assert "ddpbench.run.train" in _modules()  # what torchrun starts


@pytest.fixture(scope="module")
def help_runs():
    """`python -m <module> --help` and `python -m ddpbench VERB --help` for every quoted command,
    started all at once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    procs = {
        " ".join(command): subprocess.Popen(
            [sys.executable, "-m", *command, "--help"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command in _commands()
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("command", [" ".join(c) for c in _commands()])
def test_quoted_command_answers_help(help_runs, command):
    proc = help_runs[command]
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"python -m {command} --help exited {proc.returncode}:\n{out[-2000:]}"
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
    """docs/configuration.md holds what `ddpbench config-schema --markdown` prints."""
    text = _text(ROOT / "docs" / "configuration.md")
    assert config_schema.render_markdown().strip() in text, (
        "docs/configuration.md's reference is stale: paste `ddpbench config-schema --markdown` over it"
    )


WORKFLOW_RST = ROOT / "report" / "workflow.rst"  # `snakemake --report`'s workflow description
RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk"))


def _rst():
    """workflow.rst as one line of text (its sentences wrap anywhere)."""
    return " ".join(_text(WORKFLOW_RST).split())


def _rule_shell_commands():
    """The lines of every rule's `shell:` block (comments left out)."""
    for path in RULE_FILES:
        lines = _text(path).splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "shell:":
                continue
            indent = len(line) - len(line.lstrip())
            for body in lines[i + 1 :]:
                if body.strip() and len(body) - len(body.lstrip()) <= indent:
                    break
                if not body.strip().startswith("#"):
                    yield body


def _entry_points(text):
    """The `python -m ddpbench VERB` verbs `text` calls, a `python -m ddpbench.<module>` as its verb."""
    verb_of = {f"ddpbench.{module}": verb for verb, (module, _) in cli.SUBCOMMANDS.items()}
    verbs = set(re.findall(r"python -m ddpbench ([\w-]+)", text))
    return verbs | {verb_of.get(m, m) for m in re.findall(r"python -m (ddpbench(?:\.\w+)+)", text)}


def test_workflow_description_names_the_modules_and_files_the_rules_use():
    """workflow.rst's `python -m ddpbench VERB` entry points are exactly those the rules' shell
    commands call; every module, checkpoint and repository file it names exists."""
    import importlib.util

    rst = _rst()
    called = _entry_points("\n".join(_rule_shell_commands()))
    assert called, "no `python -m ddpbench VERB` found in the rules' shell commands"
    assert _entry_points(rst) == called
    for module in set(re.findall(r"``(?:python -m )?(ddpbench(?:\.\w+)+)``", rst)):
        assert importlib.util.find_spec(module), f"workflow.rst names {module}, which does not exist"
    checkpoints = set(re.findall(r"^checkpoint (\w+):", "".join(map(_text, RULE_FILES)), re.M))
    named = set(re.findall(r"checkpoint ``(\w+)``", rst))
    assert named and named <= checkpoints, f"workflow.rst names checkpoints {named}; the rules have {checkpoints}"
    for path in re.findall(r"``((?:workflow|docs|src|report|configs)/[\w./-]+|config\.yaml)``", rst):
        assert (ROOT / path).exists(), f"workflow.rst names {path}, which does not exist"


def test_workflow_description_names_the_schemas_repeat_designs():
    """The designs of `repeats` workflow.rst names (``repeats: N``, ``repeats: until_decided``)
    are the schema's, and the sequential design's numbers it quotes are the code's."""
    import yaml

    from ddpbench.analysis import sequential

    schema = yaml.safe_load(_text(ROOT / "workflow" / "schemas" / "config.schema.yaml"))["properties"]
    choices = schema["repeats"]["anyOf"]
    modes = {c["const"] for c in choices if "const" in c} | ({"N"} if any(c.get("type") == "integer" for c in choices) else set())
    rst = _rst()
    assert set(re.findall(r"``repeats: (\w+)``", rst)) == modes
    settings = schema["until_decided"]["properties"]
    first = re.search(r"runs ``first`` \((\d+)\) times", rst)
    assert first and int(first.group(1)) == settings["first"]["default"]
    assert set(re.findall(r"``(\w+)``", rst)) & set(settings) >= {"first", "max_per_cell", "compare"}
    along = re.search(r"along ((?:\d+, )+\d+)", rst)
    assert along and tuple(int(n) for n in along.group(1).split(", ")) == sequential.SCHEDULE
    together = re.search(r"cover the truth together at (\d+) %", rst)
    assert together and int(together.group(1)) / 100 == sequential.LEVEL


def test_workflow_description_states_the_intervals_the_code_computes():
    """The interval methods workflow.rst states are what analysis.intervals computes: a 95 %
    Student-t interval of the mean log (geometric mean) for timing metrics, the median with an
    order-statistic interval of its exact level for the others, Welch on log differences for
    ratios; a bootstrap only where the code has one (the cost model)."""
    import numpy as np
    from scipy import stats

    from ddpbench.analysis import cells, cost_model, intervals

    rst = _rst()
    level = re.search(r"(\d+) % Student-t interval on the log scale", rst)
    assert level and int(level.group(1)) / 100 == intervals.LEVEL
    assert "geometric mean of each timing metric" in rst and "the median of every other metric" in rst
    named = re.search(r"each timing metric \(([^)]*)\)", rst).group(1).split(", ")
    words = {"step_time_median_s": "step time", "samples_per_s": "throughput", "tokens_per_s": "throughput", "epoch_time_s": "epoch time"}
    assert set(intervals.TIMING_METRICS) <= set(words), "a new timing metric: say it in workflow.rst and here"
    assert sorted(named) == sorted({words[m] for m in intervals.TIMING_METRICS})
    assert cells.metric_interval is intervals.metric_interval  # the per-cell statistics use these

    x = np.array([1.0, 2.0, 8.0])  # geometric mean 16 ** (1/3), median 2
    y, half = np.log(x), stats.t.ppf(0.5 + intervals.LEVEL / 2, len(x) - 1) * np.log(x).std(ddof=1) / np.sqrt(len(x))
    for metric in intervals.TIMING_METRICS:
        iv = intervals.metric_interval(metric, x)
        assert np.allclose([iv.estimate, iv.low, iv.high], np.exp([y.mean(), y.mean() - half, y.mean() + half]))
        assert iv.level == intervals.LEVEL
    stated = re.search(r"order-statistic interval at its exact level \((\d+) % at (\d+) repeats\)", rst)
    assert stated, "workflow.rst states the order-statistic interval's level at a repeat count"
    n = int(stated.group(2))
    other = next(m for m in cells.METRICS if m not in intervals.TIMING_METRICS)
    iv = intervals.metric_interval(other, np.arange(1.0, n + 1))
    assert iv.estimate == np.median(np.arange(1.0, n + 1)) and iv.level == int(stated.group(1)) / 100

    assert "Welch t-intervals on the difference of the log means" in rst
    a, b = np.log([1.0, 2.0, 4.0]), np.log([2.0, 3.0, 8.0, 9.0])
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = min((va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)), min(len(a), len(b)) - 1)  # Hsu's at unequal n
    half = stats.t.ppf(0.5 + intervals.LEVEL / 2, dof) * np.sqrt(va + vb)
    iv = intervals.welch_log_ratio(np.exp(a), np.exp(b))
    assert np.allclose([iv.estimate, iv.low, iv.high], np.exp(a.mean() - b.mean() + np.array([0, -half, half])))

    for sentence in re.split(r"(?<=\.) ", rst):
        if "bootstrap" in sentence:
            assert "cost model" in sentence, f"workflow.rst's bootstrap is the cost model's only: {sentence!r}"
    assert cost_model.N_BOOT > 0


def test_workflow_description_is_valid_restructuredtext():
    """`snakemake --report` renders workflow.rst with docutils: no warning or error."""
    import io

    from docutils.core import publish_doctree
    from docutils.nodes import system_message

    quiet = {"report_level": 2, "halt_level": 5, "warning_stream": io.StringIO()}  # messages kept in the tree
    doctree = publish_doctree(_text(WORKFLOW_RST), settings_overrides=quiet)
    problems = [m.astext() for m in doctree.findall(system_message) if m["level"] >= 2]
    assert not problems, problems


def test_every_preset_names_a_study_and_the_pages_point_to_them_without_listing_them():
    """Every preset's `study:` in configs/studies/ is a study with a report section (STUDIES). A study
    is one module: its preset, a grid to run it, is a second file it may add (every built-in one
    has one), and `study:` in any config or `report --study` reaches it without. The README and
    docs/report.md point to configs/studies/ and docs/studies.md instead of listing the studies (a list that every new
    study had to extend by hand, issue 70); docs/studies.md's table links each preset it describes,
    and the link check keeps those links live."""
    import yaml

    presets = sorted((ROOT / "configs" / "studies").glob("*.yaml"))
    named = [yaml.safe_load(_text(p)).get("study") for p in presets]
    studies = {n for names in named for n in ([names] if isinstance(names, str) else names or [])}
    assert studies <= set(config_schema.STUDIES), f"presets naming an unknown study: {studies - set(config_schema.STUDIES)}"
    readme = re.search(r"\| \[docs/studies\.md\]\(docs/studies\.md\) \| the study presets \(([^)]*)\)", _text(README))
    assert readme and "configs/studies/" in readme.group(1), "README's docs table: the row of docs/studies.md"
    report = re.search(r"A \*\*study preset\*\* \(([^)]*)\)", _text(ROOT / "docs" / "report.md"))
    assert report and "configs/studies/" in report.group(1), "docs/report.md: where the study presets are"
