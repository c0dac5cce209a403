"""Links written through again (issue 69, item 5): each writer a review of 67ce4e7 found
following a link, now through the one safe file layer (core.safe_io), each with the victim a
planted symlink or hard link pointed at left untouched.

- the netlab node logs (netlab_logs/node<N>.log, a plain open(..., "w"));
- commbench's CSV, written through `{path}.tmp{pid}` (a plain open: links for the pid range);
- `launch --log` (storage.output_to: O_TRUNC without O_NOFOLLOW);
- `decide --log` (write_text);
- a rank's error_rank<R>.txt (write_text) and heartbeat_rank<R> (O_TRUNC without O_EXCL: a hard link);
- a folder in a run's path replaced by a link after the workflow's check (no folder below the
  results folder is followed);
- refuse_linked_folders' walk skipped a folder it could not list: as a non-root user, a
  mode-0311 runs/ holding a linked folder passed the check;
- a top-level folder of the results folder (aggregate/, report/, logs/, design/, data/, peaks/)
  replaced by a link after that check: the writers outside run folders anchored at the file's own
  folder (aggregate, report, archive, decide, the progress files, the launcher's log, prepare_data's
  record and log, a kept FLOP count); told the results folder, each refuses.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from ddpbench import REPO_ROOT
from ddpbench.core import safe_io

PRECIOUS = "precious\n"
PLANTS = ("symlink", "hardlink")


def victim_at(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(PRECIOUS)
    return victim


def plant(kind: str, victim: Path, at: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        at.symlink_to(victim)
    else:
        os.link(victim, at)


def own_file(path: Path) -> bool:
    st = os.lstat(path)
    return path.is_file() and not path.is_symlink() and st.st_nlink == 1


# -- the netlab node logs ----------------------------------------------------------------------


class LocalLab:
    """What run_on_nodes asks of a lab, without namespaces: each node's command runs here."""

    def popen(self, node, cmd, env=None, **kw):
        return subprocess.Popen(cmd, env=env, start_new_session=True, **kw)

    def node_env(self, node):
        return dict(os.environ)


@pytest.mark.parametrize("kind", PLANTS)
def test_the_netlab_node_logs_do_not_write_through_a_planted_link(tmp_path, kind):
    from ddpbench.cluster import netlab

    victim = victim_at(tmp_path)
    logs = tmp_path / "run" / "netlab_logs"
    for node in range(2):
        plant(kind, victim, logs / f"node{node}.log")
    say = [sys.executable, "-c", "print('node output')"]
    assert netlab.run_on_nodes(LocalLab(), lambda node: say, timeout_s=60, log_dir=logs) == [0, 0]
    assert victim.read_text() == PRECIOUS
    assert all(own_file(logs / f"node{n}.log") and "node output" in (logs / f"node{n}.log").read_text() for n in range(2))


def test_a_linked_netlab_logs_folder_is_refused(tmp_path):
    from ddpbench.cluster import netlab

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "netlab_logs").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(safe_io.UnsafePathError, match="netlab_logs is a symlink"):
        netlab.run_on_nodes(LocalLab(), lambda node: ["true"], timeout_s=60, log_dir=tmp_path / "run" / "netlab_logs")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# -- commbench's CSV ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PLANTS)
def test_commbench_writes_no_planted_temporary_name(tmp_path, kind):
    from ddpbench.comm import commbench

    victim = victim_at(tmp_path)
    path = tmp_path / "sweep" / "commbench.csv"
    pid = os.getpid()
    for name in [f"{path.name}.tmp{p}" for p in range(pid - 20, pid + 20)] + [path.name]:
        plant(kind, victim, path.with_name(name))
    commbench.write_csv(str(path), [{c: 1 for c in commbench.CSV_COLUMNS}])
    assert victim.read_text() == PRECIOUS
    assert own_file(path) and path.read_text().splitlines()[0].split(",") == list(commbench.CSV_COLUMNS)


# -- launch --log (storage.output_to) ----------------------------------------------------------

OUTPUT_TO = (
    "import sys; from pathlib import Path; from ddpbench.core import storage\n"
    "with storage.output_to(Path(sys.argv[1])) as out:\n"
    "    print('to the log'); out.say('to the terminal')\n"
)


def output_to(log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", OUTPUT_TO, str(log)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", PLANTS)
def test_the_launchers_log_does_not_write_through_a_planted_link(tmp_path, kind):
    victim = victim_at(tmp_path)
    log = tmp_path / "launch.log"
    plant(kind, victim, log)
    proc = output_to(log)
    assert proc.returncode == 0 and "to the terminal" in proc.stdout, proc.stderr
    assert victim.read_text() == PRECIOUS
    assert own_file(log) and "to the log" in log.read_text()


def test_a_folder_of_a_run_linked_after_the_check_is_not_followed(tmp_path):
    """runs/device~cpu replaced by a link once the workflow checked the folder: the launcher's
    log, a summary and the run folder itself are refused, the victim folder untouched."""
    victim = tmp_path / "victim"
    (victim / "repeat~0").mkdir(parents=True)  # the run folder, made before the link was planted
    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    (results / "runs" / "device~cpu").symlink_to(victim, target_is_directory=True)
    run = results / "runs" / "device~cpu" / "repeat~0"
    proc = output_to(run / "launch.log")
    assert proc.returncode != 0 and "runs/device~cpu is a symlink" in proc.stderr, proc.stderr
    with pytest.raises(safe_io.UnsafePathError, match="runs/device~cpu is a symlink"):
        safe_io.atomic_write_text(run / "summary.json", "{}")
    with pytest.raises(safe_io.UnsafePathError, match="runs/device~cpu is a symlink"):
        safe_io.make_dir(run)
    assert list(victim.rglob("*")) == [victim / "repeat~0"]


# -- decide --log ------------------------------------------------------------------------------


def recorded_design(results: Path) -> list[str]:
    """A results folder whose recorded study is a sequential design (configs/tiny.yaml), with its
    first round measured; returns the round's summary paths."""
    from ddpbench.core.layout import Layout
    from ddpbench.plan.study import Study, validate_config

    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    config.update(yaml.safe_load((REPO_ROOT / "configs" / "tiny.yaml").read_text()))
    config.update(results=str(results), repeats="until_decided")
    validate_config(config, REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml")
    results.mkdir(parents=True, exist_ok=True)
    Path(Layout.of(results).config).write_text(yaml.safe_dump(config, sort_keys=False))
    study = Study.recorded(results)
    for i, path in enumerate(study.summaries()):
        Path(path).parent.mkdir(parents=True)
        Path(path).write_text(json.dumps({"status": "ok", "samples_per_s": 100.0 + i, "wall_time_s": 2.0}))
    return study.summaries()


def decide(results: Path, log: Path, monkeypatch) -> int:
    from ddpbench.plan import decide as entry

    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(recorded_design(results)) + "\n"))
    argv = ["--results", str(results), "--round", "0", "--out", str(results / "design" / "round~0.json"), "--log", str(log)]
    return entry.main(argv)


@pytest.mark.parametrize("kind", PLANTS)
def test_decide_does_not_write_its_log_through_a_planted_link(tmp_path, monkeypatch, kind):
    victim = victim_at(tmp_path)
    log = tmp_path / "results" / "logs" / "decide_round" / "round~0.log"
    plant(kind, victim, log)
    assert decide(tmp_path / "results", log, monkeypatch) == 0
    assert victim.read_text() == PRECIOUS
    assert own_file(log) and log.read_text().strip()


def test_decide_follows_no_linked_folder_below_the_results_folder(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    (results / "logs" / "decide_round").symlink_to(victim, target_is_directory=True)
    with pytest.raises(safe_io.UnsafePathError, match="logs/decide_round is a symlink"):
        decide(results, results / "logs" / "decide_round" / "round~0.log", monkeypatch)
    assert list(victim.iterdir()) == []


# -- a rank's error_rank<R>.txt and heartbeat_rank<R> --------------------------------------------

TRAIN = ["--strategy", "single", "--dataset-size", "64", "--test-size", "16", "--max-steps", "3", "--warmup-steps", "0",
         "--min-timed-steps", "1", "--min-timed-s", "0"]  # fmt: skip


@pytest.mark.parametrize(("error", "heartbeat"), [("symlink", "hardlink"), ("hardlink", None)])
def test_a_rank_writes_neither_its_error_file_nor_its_heartbeat_through_a_planted_link(tmp_path, error, heartbeat):
    """A rank run by itself (no launcher, so no clear step before it: as a link planted after
    the launcher cleared the run folder) that fails at step 1: error_rank0.txt holds its
    traceback and heartbeat_rank0 its last position, each a file of its own."""
    victims = {name: victim_at(tmp_path / name) for name in ("error", "heartbeat")}
    out = tmp_path / "run"
    plant(error, victims["error"], out / "error_rank0.txt")
    if heartbeat:
        plant(heartbeat, victims["heartbeat"], out / "heartbeat_rank0")
    env = {**os.environ, "DDPBENCH_FAULTS": "1", "DDPBENCH_INJECT": "fail:0:1"}
    proc = subprocess.run([sys.executable, "-m", "ddpbench.run.train", "--out", str(out), *TRAIN], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert all(v.read_text() == PRECIOUS for v in victims.values())
    assert own_file(out / "error_rank0.txt") and "injected failure" in (out / "error_rank0.txt").read_text()
    assert own_file(out / "heartbeat_rank0")
    from ddpbench.run import diagnose

    assert diagnose.read_heartbeats(out)[0].step == 1


@pytest.mark.parametrize("kind", PLANTS)
def test_the_heartbeat_is_a_file_of_its_own(tmp_path, kind):
    """A symlink at the heartbeat's name stopped the rank (O_NOFOLLOW: ELOOP), a hard link had
    its target truncated and rewritten at every phase (O_TRUNC without O_EXCL)."""
    from ddpbench.run import diagnose

    victim = victim_at(tmp_path)
    path = tmp_path / "run" / "heartbeat_rank0"
    plant(kind, victim, path)
    beat = diagnose.Heartbeat(path)
    beat.start_step(7)
    assert victim.read_text() == PRECIOUS
    assert own_file(path) and diagnose.read_heartbeats(path.parent)[0].step == 7


# -- the linked-folder check, as a user who cannot list a folder ---------------------------------


def as_nobody() -> tuple[list[str], dict]:
    """A command prefix and subprocess.run arguments that run a Python command as the user
    `nobody` (the tests run as root in CI); skips, saying why, where that cannot be done.
    setpriv execs before its capabilities go, so an interpreter under a folder `nobody` cannot
    enter (/root/.pyenv) still starts; without setpriv the process drops its user itself."""
    if os.geteuid() != 0:
        return [], {}  # not root already: the folder's mode applies to us
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody` to drop to")

    def drop() -> None:
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    setpriv = shutil.which("setpriv")
    prefix = [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"] if setpriv else []
    kwargs = {} if setpriv else {"preexec_fn": drop}
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import os, ddpbench.core.safe_io; print(os.geteuid())"],
                               capture_output=True, text=True, timeout=120, cwd="/", **kwargs)  # fmt: skip
    except OSError as err:
        pytest.skip(f"cannot start Python as `nobody` here: {err}")
    if probe.returncode != 0 or probe.stdout.strip() != str(user.pw_uid):
        pytest.skip(f"cannot run this package's Python as `nobody` here: {probe.stderr.strip()[-300:]}")
    return prefix, kwargs


def test_a_folder_the_check_cannot_list_is_refused_as_a_non_root_user():
    prefix, kwargs = as_nobody()
    base = Path(tempfile.mkdtemp(prefix="ddpbench-unlistable-"))  # not under pytest's 0700 folder: `nobody` reaches it
    try:
        base.chmod(0o755)
        victim, results = base / "victim", base / "results"
        victim.mkdir()
        (results / "runs").mkdir(parents=True)
        (results / "runs" / "device~cpu").symlink_to(victim, target_is_directory=True)
        (results / "runs").chmod(0o311)  # others may enter, not list
        code = "import sys; from ddpbench.core import safe_io; safe_io.refuse_linked_folders(sys.argv[1]); print('passed')"
        proc = subprocess.run([*prefix, sys.executable, "-c", code, str(results)], capture_output=True, text=True,
                              timeout=120, cwd=base, **kwargs)  # fmt: skip
        assert proc.returncode != 0 and "passed" not in proc.stdout, proc.stdout
        assert "UnsafePathError" in proc.stderr and f"cannot list {results / 'runs'}" in proc.stderr, proc.stderr[-2000:]
        assert list(victim.iterdir()) == []
    finally:
        (base / "results" / "runs").chmod(0o755)
        shutil.rmtree(base)


def test_a_listable_results_folder_with_a_linked_folder_is_still_refused(tmp_path):
    (tmp_path / "results" / "runs").mkdir(parents=True)
    (tmp_path / "results" / "runs" / "a~1").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(safe_io.UnsafePathError, match="runs/a~1"):
        safe_io.refuse_linked_folders(tmp_path / "results")
    safe_io.refuse_linked_folders(tmp_path / "nothing yet")  # a results folder not made yet: nothing to check


# -- a top-level folder of the results folder linked after the workflow's check ------------------
# The workflow checks the results folder once, at its start (refuse_linked_folders); each writer
# below runs later, with aggregate/, report/, logs/, design/, data/ or peaks/ replaced by a link
# meanwhile. Told the results folder (--results, or the run folder's), each refuses, naming the
# link, and the victim folder keeps what it held (before: written, truncated or removed there).


def linked(results: Path, folder: str, files: dict[str, str] | None = None) -> Path:
    """`results/folder` replaced by a link to a victim folder holding `files` (name: text); the victim."""
    victim = results.parent / f"victim-{folder}"
    victim.mkdir()
    for name, text in (files or {}).items():
        (victim / name).write_text(text)
    results.mkdir(parents=True, exist_ok=True)
    if (results / folder).exists():
        (results / folder).rename(results / f"{folder}.before")
    (results / folder).symlink_to(victim, target_is_directory=True)
    return victim


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def refused(results: Path, folder: str) -> str:
    """The UnsafePathError's text naming the linked folder (pytest.raises' match)."""
    return f"{re.escape(str(results / folder))} is a symlink"


PROGRESS = {"progress.json": json.dumps({"started": 0.0, "total": 3}) + "\n", "progress.log": "1.0\tan earlier run\n"}


@pytest.mark.parametrize("folder", ["aggregate", "logs"])
def test_aggregate_follows_no_folder_of_the_results_folder_linked_after_the_check(tmp_path, folder):
    from ddpbench.results import aggregate

    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    victim = linked(results, folder, {"runs.csv": PRECIOUS, "steps.csv": PRECIOUS, "profile.csv": PRECIOUS,
                                      "aggregate.log": PRECIOUS})  # fmt: skip
    before = snapshot(victim)
    tables = ["--runs", results / "aggregate" / "runs.csv", "--steps", results / "aggregate" / "steps.csv"]
    log = ["--log", results / "logs" / "aggregate.log"] if folder == "logs" else []  # (in-process: no redirect)
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, folder)):
        aggregate.main([str(a) for a in [*tables, *log, "--results", results]])
    assert snapshot(victim) == before


def test_the_report_follows_no_report_folder_linked_while_it_runs(tmp_path, monkeypatch, capsys):
    """report/ replaced by a link once the report made it (make_dir checked it) and began: no table,
    figure or page is written into the victim."""
    from report_synth import make_runs

    from ddpbench.report import build

    results = tmp_path / "results"
    runs = results / "aggregate" / "runs.csv"
    runs.parent.mkdir(parents=True)
    make_runs(world_sizes=(1, 2), strategies=("single", "ddp"), repeats=1, failures=False).to_csv(runs, index=False)
    victim = {}
    start_tables = build.start_tables

    def plant_then_start(*args):
        victim["folder"] = linked(results, "report", {"cells.csv": PRECIOUS, "report.html": PRECIOUS})
        victim["before"] = snapshot(victim["folder"])
        return start_tables(*args)

    monkeypatch.setattr(build, "start_tables", plant_then_start)
    monkeypatch.setenv("DDPBENCH_REPORT_WORKERS", "1")
    argv = ["--runs", runs, "--out", results / "report", "--no-pdf", "--results", results]
    assert build.main([str(a) for a in argv]) == 1
    assert re.search(refused(results, "report"), capsys.readouterr().err)
    assert snapshot(victim["folder"]) == victim["before"]


@pytest.mark.parametrize("verb", ["report", "archive"])
def test_the_report_and_the_archive_follow_no_linked_logs_folder(tmp_path, verb):
    from ddpbench.report import build
    from ddpbench.results import archive

    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    victim = linked(results, "logs", {f"{verb}.log": PRECIOUS})
    log = ["--log", str(results / "logs" / f"{verb}.log"), "--results", str(results)]
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, "logs")):
        if verb == "report":
            build.main(["--runs", str(results / "aggregate" / "runs.csv"), "--out", str(results / "report"), *log])
        else:
            archive.main(["--out", str(tmp_path / "results.tar.gz"), *log])
    assert (victim / f"{verb}.log").read_text() == PRECIOUS and snapshot(victim) == {f"{verb}.log": PRECIOUS.encode()}
    assert not (tmp_path / "results.tar.gz").exists() and not (results / "report").exists()


@pytest.mark.parametrize("folder", ["design", "logs"])
def test_decide_follows_no_design_or_logs_folder_linked_after_the_check(tmp_path, monkeypatch, folder):
    """The decision (design/round~0.json), the progress count it adds the next round to and its
    log: design/ or logs/ linked, none is written there."""
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    victim = linked(results, folder, {"round~0.json": PRECIOUS, **PROGRESS})
    before = snapshot(victim)
    monkeypatch.setenv("DDPBENCH_PROGRESS", str(results / "logs" / "progress.json"))
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, folder)):
        decide(results, results / "logs" / "decide_round" / "round~0.log", monkeypatch)
    assert snapshot(victim) == before


def test_the_workflows_progress_file_follows_no_linked_logs_folder(tmp_path, monkeypatch):
    """onstart's progress.start (the workflow passes its results folder): progress.json is not
    written into the victim, nor its progress.log removed."""
    from ddpbench.results import progress

    monkeypatch.delenv(progress.ENV, raising=False)
    results = tmp_path / "results"
    victim = linked(results, "logs", PROGRESS)
    before = snapshot(victim)
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, "logs")):
        progress.start(results / "logs" / "progress.json", 5, root=results)
    assert snapshot(victim) == before


OVERSUBSCRIBED = [
    "--nproc-per-node", "3", "--model", "mlp", "--dataset-size", "64", "--batch-size", "16", "--test-size", "0",
    "--max-steps", "3", "--strategy", "allreduce", "--threads-per-rank", str(len(os.sched_getaffinity(0)) // 3 + 1),
]  # fmt: skip


@pytest.mark.parametrize("what", ["log", "progress"])
def test_the_launcher_follows_no_linked_logs_folder(tmp_path, monkeypatch, capfd, what):
    """A cell's launcher (skipped before any rank starts: oversubscribed) told its run folder
    RESULTS/runs/<cell>/repeat~0: its --log below logs/ is refused; its progress line, with
    progress.json below logs/, is left out instead of appended to the victim's progress.log."""
    from ddpbench.run import launch

    results = tmp_path / "results"
    run = results / "runs" / "strategy~allreduce" / "repeat~0"
    victim = linked(results, "logs", PROGRESS)
    before = snapshot(victim)
    monkeypatch.setenv("DDPBENCH_PROGRESS", str(results / "logs" / "progress.json"))
    argv = ["--out", str(run), *OVERSUBSCRIBED]
    if what == "log":
        with pytest.raises(safe_io.UnsafePathError, match=refused(results, "logs")):
            launch.main([*argv, "--log", str(results / "logs" / "train" / "strategy~allreduce" / "repeat~0.log")])
        assert not run.exists()
    else:
        assert launch.main(argv) == 0
        assert json.loads((run / "summary.json").read_text())["status"] == "skipped"
        assert "runs," not in capfd.readouterr().out  # no progress text: nothing was recorded
    assert snapshot(victim) == before


def test_a_kept_flop_count_is_not_written_into_a_peaks_folder_linked_while_it_is_kept(tmp_path, monkeypatch):
    """peaks/ replaced by a link as the count is signed (after the folder was made and checked)."""
    from ddpbench.core import peaks
    from ddpbench.run import flops

    monkeypatch.setenv("DDPBENCH_HOST_PEAKS", "off")
    results = tmp_path / "results"
    (results / "peaks").mkdir(parents=True)
    signed, victim = peaks.signed, tmp_path / "victim-peaks"

    def plant_then_sign(record):  # once: the host's copy is off
        linked(results, "peaks")
        return signed(record)

    monkeypatch.setattr(peaks, "signed", plant_then_sign)
    kept = flops.cached_count(results, {"model": "mlp"}, lambda: 123.0)
    assert kept["flops_per_sample"] == 123.0 and kept["file"] is None
    assert re.search(refused(results, "peaks"), kept["not_kept"]), kept
    assert snapshot(victim) == {}


@pytest.mark.parametrize("folder", ["data", "logs"])
def test_prepare_data_writes_no_record_or_log_into_a_linked_folder(tmp_path, monkeypatch, folder):
    """The prepare_data rule's record (RESULTS/data/<dataset>.txt) and log, written by the verb
    (a shell's `>` followed every link)."""
    from ddpbench.run import data

    monkeypatch.setattr(data, "_torchvision", lambda *a, **k: (range(3), range(2), (1, 28, 28)))
    results = tmp_path / "results"
    (results / "logs").mkdir(parents=True)
    victim = linked(results, folder, {"mnist.txt": PRECIOUS, "mnist.log": PRECIOUS})
    before = snapshot(victim)
    argv = ["--dataset", "mnist", "--data-root", str(tmp_path / "datasets"), "--record", str(results / "data" / "mnist.txt"),
            "--results", str(results)]  # fmt: skip
    log = ["--log", str(results / "logs" / "mnist.log")] if folder == "logs" else []  # (in-process: no redirect)
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, folder)):
        data.main(argv + log)
    assert snapshot(victim) == before


def test_remove_takes_only_the_name_and_follows_no_linked_folder(tmp_path):
    """safe_io.remove (the stale profile.csv, the last workflow run's progress.log): a link at the
    name goes, its target stays; a linked folder is refused."""
    victim = victim_at(tmp_path)
    results = tmp_path / "results"
    plant("symlink", victim, results / "aggregate" / "profile.csv")
    assert safe_io.remove(results / "aggregate" / "profile.csv", root=results) is True
    assert victim.read_text() == PRECIOUS and not os.path.lexists(results / "aggregate" / "profile.csv")
    assert safe_io.remove(results / "aggregate" / "profile.csv", root=results) is False
    other = linked(results, "aggregate", {"profile.csv": PRECIOUS})
    with pytest.raises(safe_io.UnsafePathError, match=refused(results, "aggregate")):
        safe_io.remove(results / "aggregate" / "profile.csv", root=results)
    assert (other / "profile.csv").read_text() == PRECIOUS
