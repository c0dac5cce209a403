"""The `ddpbench` command and `python -m ddpbench`: one command line, its verbs in cli.SUBCOMMANDS."""

import os
import subprocess
import sys
import types

import pytest

from ddpbench import PACKAGE_DIR, cli

pytestmark = pytest.mark.unit


def test_python_m_ddpbench_is_the_command_with_only_the_source_on_the_path(tmp_path):
    """As inside a container: no console script, the checkout's src/ on PYTHONPATH, another folder."""
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_DIR.parent)}
    listed = subprocess.run([sys.executable, "-m", "ddpbench"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and all(verb in listed.stdout for verb in cli.SUBCOMMANDS), listed.stderr
    helped = subprocess.run([sys.executable, "-m", "ddpbench", "aggregate", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert helped.returncode == 0 and helped.stdout.startswith("usage: ddpbench aggregate"), helped.stderr
    unknown = subprocess.run([sys.executable, "-m", "ddpbench", "nonsense"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown command 'nonsense'" in unknown.stderr


def _verb(monkeypatch, main):
    module = types.ModuleType("ddpbench.fake_verb")
    module.main = main
    monkeypatch.setitem(sys.modules, "ddpbench.fake_verb", module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", ("fake_verb", "a verb for this test"))


def test_a_verb_gets_its_arguments_and_its_exit_status_is_the_commands(monkeypatch, capsys):
    seen = []
    _verb(monkeypatch, lambda argv: seen.append(argv) or 3)
    assert cli.main(["fake", "--x", "1"]) == 3 and seen == [["--x", "1"]]


@pytest.mark.parametrize(("code", "status", "said"), [(None, 0, ""), (0, 0, ""), (2, 2, ""), ("error: bad archive", 1, "error: bad archive")])
def test_a_verbs_system_exit_is_the_exit_status_and_its_message_is_said(monkeypatch, capsys, code, status, said):
    """SystemExit("message") prints the message and exits 1, as the interpreter does for a module run with -m."""

    def main(argv):
        raise SystemExit(code)

    _verb(monkeypatch, main)
    assert cli.main(["fake"]) == status
    assert capsys.readouterr().err.strip() == said


@pytest.mark.parametrize("verb", sorted(cli.SUBCOMMANDS))
def test_every_verbs_help_says_percent_once(verb, capsys):
    """Issue 68: `ddpbench compare --help` printed "95 %%": argparse %-formats help strings (where
    %% is one %), but a description or epilog only when it names %(prog)."""
    cli.main([verb, "--help"])  # (slurm's only form is `slurm node`: its --help is a usage error)
    said = capsys.readouterr()
    text = said.out + said.err
    assert "usage:" in text and "%%" not in text
    if verb == "compare":
        assert "(95 % Welch interval of the ratio NEW/BASE)" in " ".join(text.split())
