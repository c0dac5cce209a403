"""The fault matrix: every way a cell dies is recorded with the right kind, rank and step,
leaves no process behind, and a rerun measures it again.

Faults are real: a rank that raises, is SIGKILLed, fails an allocation under an
address-space limit, is stopped by the kernel's out-of-memory killer inside a
memory-limited cgroup (root with a writable memory cgroup, else skipped), hangs; the
launcher itself SIGKILLed; two cells at once.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ddpbench.run import warm

FLAGS = [
    "--synthetic-shape", "mnist", "--dataset-size", "64", "--test-size", "16", "--batch-size", "8",
    "--max-steps", "12", "--warmup-steps", "1", "--min-timed-s", "0", "--threads-per-rank", "1",
]  # fmt: skip


def launch_cmd(out, *flags):
    return [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS, *flags]


def launch(out, *flags, inject=None, timeout=240, preexec_fn=None):
    env = dict(os.environ, **({"DDPBENCH_INJECT": inject} if inject else {}))
    proc = subprocess.run(
        launch_cmd(out, *flags), capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=preexec_fn
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_no_process_left(out)
    return json.loads((out / "summary.json").read_text()), proc.stdout


def processes_of(out: Path) -> list[int]:
    """PIDs whose command line or environment names `out`, that run inside it or hold a file of it
    open (launcher, torchrun, ranks; a workflow's jobs run in its directory with relative paths).
    The ranks forked from a cold zygote carry the zygote's command line: the launcher's command in
    their environment (sysinfo.LAUNCH_COMMAND_ENV) names them. A warm zygote's (ddpbench.run.warm)
    carry its server's command line and starting environment: their output, train.log, names them."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                environ = (entry / "environ").read_bytes().decode(errors="replace")
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if str(out) in cmdline or str(out) in environ or cwd == str(out) or cwd.startswith(f"{out}/"):
                found.append(int(entry.name))
            elif any(target == str(out) or target.startswith(f"{out}/") for target in open_files(entry)):
                found.append(int(entry.name))
    return found


def open_files(process: Path) -> list[str]:
    try:
        return [os.readlink(fd) for fd in (process / "fd").iterdir()]
    except OSError:  # gone, or not ours to read
        return []


def assert_no_process_left(out: Path, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while processes_of(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_of(out), f"processes left behind: {processes_of(out)}"


@pytest.mark.parametrize(
    ("inject", "strategy", "status", "kind", "signal_name", "reason_part"),
    [
        ("fail:1:5", "allreduce", "failed", "exception", None, "injected failure"),
        ("kill:1:5", "allreduce", "failed", "signal", "SIGKILL", "killed by SIGKILL"),
        ("oom:1:5", "allreduce", "failed", "oom", None, "can't allocate memory"),
        # DDP: rank 0 times out inside a communication hook's callback (an "At:" traceback)
        ("hang:1:5", "ddp", "timeout", "hang", None, "stopped making progress"),
    ],
    ids=["raise", "sigkill", "allocation-fails", "hang"],
)
def test_a_failing_rank_is_named_with_its_kind_and_step(tmp_path, inject, strategy, status, kind, signal_name, reason_part):
    out = tmp_path / "run"
    summary, stdout = launch(out, "--strategy", strategy, "--timeout-s", "15", "--grace-s", "20", inject=inject)
    failure = summary["failure"]
    assert summary["status"] == status, summary["reason"]
    assert (failure["kind"], failure["rank"], failure["step"], failure["signal"]) == (kind, 1, 5, signal_name), failure
    assert reason_part in failure["reason"] and failure["reason"].startswith("rank 1 ")
    assert summary["reason"].splitlines()[0] == failure["reason"]  # the cause first
    assert all(s.startswith("rank 0 ") for s in failure["secondary"])  # rank 0 only lost its peer
    assert failure["reason"] in stdout


def test_the_kernel_out_of_memory_killer_is_recognised(tmp_path):
    """The launcher in a memory cgroup limited to 1.5 GB; rank 1 allocates until the kernel
    kills it. Recorded as oom (not just a SIGKILL) from the cgroup's oom_kill count."""
    root = Path("/sys/fs/cgroup/memory")
    group = root / f"ddpbench-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(1536 * 2**20))
    except OSError as err:
        pytest.skip(f"no writable cgroup v1 memory controller here ({err})")

    def enter():
        (group / "cgroup.procs").write_text(str(os.getpid()))

    try:
        summary, _ = launch(tmp_path / "run", "--strategy", "allreduce", inject="grow:1:5", preexec_fn=enter)
    finally:
        warm.retire_all()  # a warm zygote's server started inside the group stays there until retired
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)
    failure = summary["failure"]
    assert (failure["kind"], failure["rank"], failure["signal"], failure["step"]) == ("oom", 1, "SIGKILL", 5), failure
    assert "out-of-memory killer fired" in failure["reason"] and "limit 1.50 GiB" in failure["reason"]
    assert failure["memory_limit_bytes"] == 1536 * 2**20 and failure["memory_peak_bytes"] > 2**30


def test_a_killed_launcher_takes_its_ranks_with_it_and_a_rerun_measures_the_cell(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(launch_cmd(out, "--strategy", "allreduce"), env=dict(os.environ, DDPBENCH_INJECT="hang:1:3"))
    deadline = time.monotonic() + 120
    while not (out / "heartbeat_rank1").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert_no_process_left(out, within_s=30)
    assert not (out / "summary.json").exists()  # nothing claims the cell ran
    summary, _ = launch(out, "--strategy", "allreduce")
    assert summary["status"] == "ok" and "failure" not in summary
    assert not list(out.glob("error_rank*"))


def test_two_cells_at_once_do_not_collide(tmp_path):
    """Without the timing slot two launches run side by side: free ports, own folders."""
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen(launch_cmd(o, "--strategy", "ddp"), stdout=subprocess.PIPE, text=True) for o in outs]
    for p in procs:
        p.communicate(timeout=240)
        assert p.returncode == 0
    for o in outs:
        summary = json.loads((o / "summary.json").read_text())
        assert summary["status"] == "ok", summary["reason"]
        assert "failure" not in summary
        assert_no_process_left(o)


@pytest.mark.parametrize("pause", ["launcher:start", "1:rendezvous", "0:summary", "launcher:finish"])
def test_ctrl_c_stops_the_launcher_promptly_at_every_pause_point(tmp_path, pause):
    """Issue 68: a loaded CI machine once saw a launcher paused at its finish still running 30 s
    after Ctrl-C. Wherever the cell is (before any rank, ranks waiting in the rendezvous, rank 0
    about to write its summary, the launcher about to publish it), Ctrl-C ends the launcher, its
    agent and every rank, and leaves no summary: the run is redone, never kept as measured."""
    out = tmp_path / "run"
    env = dict(os.environ, DDPBENCH_INJECT=f"pause:{pause}")
    proc = subprocess.Popen(launch_cmd(out, "--strategy", "ddp"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    marker = out / f"paused_{pause.replace(':', '_')}"
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert marker.exists(), proc.communicate(timeout=30)[0]
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        proc.kill()
    assert proc.returncode in (-signal.SIGINT, 128 + signal.SIGINT), proc.returncode
    assert took < 15, f"the launcher took {took:.1f} s to stop"  # its stop waits KILL_WAIT_S (10 s) at most
    assert_no_process_left(out)
    assert not (out / "summary.json").exists()


def torchrun_of(out: Path) -> int:
    """The pid of the cell's torchrun process (the launcher's child, ddpbench.run.torchrun)."""
    for pid in processes_of(out):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "ddpbench.run.torchrun" in cmdline:
            return pid
    raise AssertionError(f"no torchrun process for {out}")


def test_a_warm_cell_whose_torchrun_is_killed_leaves_nothing_behind(tmp_path):
    """A warm zygote is not in the launcher's process group (ddpbench.run.warm): SIGKILL to the
    cell's torchrun alone, which no handler sees, still takes the zygote, the agent and the ranks
    with it (the zygote's alive pipe, then their parent-death signals)."""
    out = tmp_path / "run"
    env = dict(os.environ, DDPBENCH_INJECT="hang:1:3", **{warm.FOLDER_ENV: str(tmp_path / "warm")})
    proc = subprocess.Popen(launch_cmd(out, "--strategy", "allreduce"), env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "heartbeat_rank1").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "cold start" not in (out / "train.log").read_text()  # it did start warm
        os.kill(torchrun_of(out), signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
        warm.retire_all(tmp_path / "warm")
    assert_no_process_left(out, within_s=30)
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_a_warm_zygote_takes_each_cells_environment_and_a_bad_folder_starts_cold(tmp_path):
    """Two cells forked from one server: each rank sees its own cell's environment (an injected
    slowdown in the second only, recorded in env.env_vars); a folder others can enter is refused
    and the cell starts cold, said in its log, and is measured all the same."""
    folder = tmp_path / "warm"
    env = {**os.environ, warm.FOLDER_ENV: str(folder)}
    try:
        runs = {}
        for name, extra in (("a", {}), ("b", {"DDPBENCH_INJECT": "slow:1:1"})):
            out = tmp_path / name
            subprocess.run(launch_cmd(out, "--strategy", "allreduce"), env={**env, **extra}, check=True, timeout=240)
            runs[name] = json.loads((out / "summary.json").read_text())
            assert "cold start" not in (out / "train.log").read_text()
        assert len(list(folder.glob("*.sock"))) == 1  # one server for both
        assert "DDPBENCH_INJECT" not in runs["a"]["env"]["env_vars"]
        assert runs["b"]["env"]["env_vars"]["DDPBENCH_INJECT"] == "slow:1:1"
    finally:
        warm.retire_all(folder)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    out = tmp_path / "c"
    subprocess.run(launch_cmd(out), env={**env, warm.FOLDER_ENV: str(shared)}, check=True, timeout=240)
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
    assert "a cold start (no warm zygote: " in (out / "train.log").read_text()
    assert not list(shared.iterdir())
