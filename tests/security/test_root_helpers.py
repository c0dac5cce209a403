"""The root helpers trust nothing someone else could have put in their way (issue 22).

scripts/slurm_cluster.sh and containers/build.sh run as root. Their state or work folder
must be one only the current user controls; pid files count only when they name a live
daemon the script started; `stop` cancels only its own controller's jobs and ends only
its own slurmd's step daemons; nothing is written through a symbolic link.

No daemon is started and no image is built: slurm_cluster.sh is sourced (it runs
nothing then) with `kill` replaced by a shell function that records its arguments, and
SLURM's client commands replaced by stubs on PATH that record theirs; the stand-in
daemons are small shell scripts named munged, slurmctld, slurmstepd (a script's
/proc/PID/comm is its file name). containers/build.sh runs from a copy of the files it
needs, with podman, runc, debootstrap and apt-get stubbed.
"""

import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SLURM = ROOT / "scripts" / "slurm_cluster.sh"
BUILD = ROOT / "containers" / "build.sh"
IS_ROOT = os.geteuid() == 0
OTHER_UID = 65534  # nobody

STUB = """#!/bin/sh
echo "$(basename "$0") SLURM_CONF=${SLURM_CONF:-} $*" >>"$STUB_LOG"
# squeue lists $SQUEUE_JOBS, and none left running once asked for running ones (-t)
case "$(basename "$0") $* " in squeue*" -t "*) ;; squeue*) printf '%s\\n' ${SQUEUE_JOBS:-} ;; esac
[ "$(basename "$0")" = debootstrap ] && echo "work-folder $(stat -c '%a %u' "$(dirname "$3")")" >>"$STUB_LOG"
exit "${STUB_RC:-0}"
"""
SLURM_STUBS = ("squeue", "scancel", "sinfo", "scontrol", "pkill", "kill", "slurmd", "slurmctld", "apt-get")
BUILD_STUBS = ("podman", "runc", "debootstrap", "apt-get")

# A daemon stand-in: holds its first argument open (as slurmstepd holds slurmd's log)
# and waits; ends on SIGTERM.
FAKE_DAEMON = """#!/bin/sh
exec 3>>"$1"
trap 'exit 0' TERM
while :; do sleep 0.1; done
"""


@pytest.fixture
def env(tmp_path):
    """A PATH with recording stubs first, and the files the cases use."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in set(SLURM_STUBS + BUILD_STUBS):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "SLURM_CONF": "/somewhere/else/slurm.conf",  # a real cluster's config, say: never used
        "DDPBENCH_SLURM_DIR": str(state),
    }


def calls(env):
    return pathlib.Path(env["STUB_LOG"]).read_text().splitlines()


def kills(env):
    return [c for c in calls(env) if c.startswith("kill ")]


def sourced(env, body, conf=None, allow_kill=()):
    """Run `body` in bash after sourcing slurm_cluster.sh; `kill` records its arguments
    and signals only the pids in allow_kill (stand-ins this test started)."""
    conf = conf or pathlib.Path(env["DDPBENCH_SLURM_DIR"]).parent / "slurm.conf"
    script = f"""
source {shlex.quote(str(SLURM))}
kill() {{
    echo "kill $*" >>"$STUB_LOG"
    case " {' '.join(map(str, allow_kill))} " in *" ${{!#}} "*) builtin kill "$@" ;; esac
}}
CONF={shlex.quote(str(conf))}
{body}
"""
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def conf_line(state):
    """The first line slurm_cluster.sh writes into the config of the cluster in `state`."""
    return f"# written by ddpbench scripts/slurm_cluster.sh (state in {state}); removed by 'stop'\n"


@pytest.fixture
def spawn_fake(tmp_path):
    """Start a stand-in daemon named `name`, the child of a shell that reaps it the moment
    it ends (as init reaps the real daemons); every one is ended at teardown."""
    started, shells = [], []

    def spawn(name, held_open, *args):
        exe = tmp_path / "fakes" / name
        exe.parent.mkdir(exist_ok=True)
        exe.write_text(FAKE_DAEMON)
        exe.chmod(0o755)
        cmd = " ".join(shlex.quote(str(a)) for a in (exe, held_open, *args))
        shell = subprocess.Popen(["bash", "-c", f"{cmd} </dev/null >/dev/null 2>&1 & echo $!; wait"],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        shells.append(shell)
        pid = int(shell.stdout.readline())
        started.append(pid)
        for _ in range(100):  # until the script runs (comm is its name) and holds the file
            if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == name and any(
                os.readlink(fd) == str(held_open) for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir()
            ):
                return pid
            time.sleep(0.02)
        raise AssertionError(f"stand-in {name} did not come up")

    yield spawn
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for shell in shells:
        shell.wait(timeout=10)
        shell.stdout.close()


def alive(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# --- pid files ----------------------------------------------------------------------


@pytest.fixture
def bystander():
    """A live process that is none of the script's daemons (the test's own sleep)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("content", ["-1", "0", "1 2", "abc", "12\n34", "1", "bystander"])
def test_pid_file_naming_no_daemon_of_ours_kills_nothing(env, bystander, content):
    """`-1` would be `kill -TERM -1` (every process); 1 is init; a live unrelated pid is
    someone else's process: none is signalled."""
    content = str(bystander.pid) if content == "bystander" else content
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    for name in ("munged", "slurmctld", "slurmd-n0"):
        (state / f"{name}.ourpid").write_text(content + "\n")
    proc = sourced({**env, "SQUEUE_JOBS": "7 8"}, "main stop")
    assert proc.returncode == 0, proc.stderr
    assert kills(env) == []
    assert not [c for c in calls(env) if c.startswith(("scancel", "squeue"))]
    assert bystander.poll() is None
    assert "killed nothing" in proc.stderr


def test_status_says_which_pid_files_are_not_ours(env, bystander):
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    (state / "slurmctld.ourpid").write_text(f"{bystander.pid}\n")
    (state / "munged.ourpid").write_text("-1\n")
    proc = sourced(env, "main status")
    assert proc.returncode == 0, proc.stderr
    assert f"slurmctld: not ours: pid {bystander.pid} in {state}/slurmctld.ourpid is sleep" in proc.stdout
    assert "munged: not ours:" in proc.stdout and "not a process id" in proc.stdout
    assert kills(env) == []


def test_stop_ends_the_daemons_it_started_and_cancels_their_jobs(env, tmp_path, spawn_fake):
    """The path that must keep working: daemons that are what their pid files say."""
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    conf = tmp_path / "slurm.conf"
    conf.write_text(conf_line(state) + "ClusterName=ddpbench\n")
    ctld = spawn_fake("slurmctld", os.devnull, "-D", "-c", "-f", conf)
    slurmd = spawn_fake("slurmd", os.devnull, "-D", "-f", conf)
    munged = spawn_fake("munged", os.devnull, "-F")
    for name, pid in (("slurmctld", ctld), ("slurmd-n0", slurmd), ("munged", munged)):
        (state / f"{name}.ourpid").write_text(f"{pid}\n")
    proc = sourced({**env, "SQUEUE_JOBS": "11 12"}, "main stop", conf=conf, allow_kill=(ctld, slurmd, munged))
    assert proc.returncode == 0, proc.stderr
    assert sorted(kills(env)) == sorted(f"kill -TERM {pid}" for pid in (ctld, slurmd, munged))
    assert not any(alive(pid) for pid in (ctld, slurmd, munged))
    # jobs listed and cancelled on this cluster's config, whatever SLURM_CONF said
    assert f"squeue SLURM_CONF={conf} -h -p debug -o %i" in calls(env)
    assert f"scancel SLURM_CONF={conf} 11 12" in calls(env)
    assert f"squeue SLURM_CONF={conf} -h -p debug -t running,completing -o %i" in calls(env)  # the bounded wait
    assert not conf.exists()
    assert not list(state.glob("*.ourpid"))


# --- stop: only its own jobs and step daemons ---------------------------------------


@pytest.mark.parametrize("case", ["ctld-not-ours", "ctld-other-conf", "conf-other-state", "conf-foreign"])
def test_stop_cancels_no_jobs_of_a_cluster_it_does_not_own(env, tmp_path, spawn_fake, bystander, case):
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        {
            "conf-other-state": conf_line(tmp_path / "elsewhere"),
            "conf-foreign": "# a real cluster's slurm.conf\n",
        }.get(case, conf_line(state))
        + "ClusterName=ddpbench\n"
    )
    before = conf.read_text()
    if case == "ctld-not-ours":
        ctld = bystander.pid
    else:
        ctld = spawn_fake("slurmctld", os.devnull, "-D", "-f", tmp_path / "other.conf" if case == "ctld-other-conf" else conf)
    (state / "slurmctld.ourpid").write_text(f"{ctld}\n")
    proc = sourced({**env, "SQUEUE_JOBS": "21 22"}, "main stop", conf=conf, allow_kill=(ctld,) if case.startswith("conf") else ())
    assert proc.returncode == 0, proc.stderr
    assert not [c for c in calls(env) if c.startswith("scancel")]
    assert "no jobs cancelled" in proc.stderr
    if case.startswith("ctld"):
        assert kills(env) == []  # nor is a controller this script did not start stopped
    else:
        assert kills(env) == [f"kill -TERM {ctld}"]  # its own controller is
        assert conf.read_text() == before  # another cluster's config is left alone


@pytest.mark.parametrize("case", ["orphaned", "served", "foreign"])
def test_stop_removes_a_config_of_ours_that_no_controller_serves(env, tmp_path, spawn_fake, case):
    """A config of ours whose cluster is gone (a test killed before its stop, its state folder
    elsewhere) would send every client to an address nobody serves: a namespace's 198.18.0.1 hung
    a bare squeue. It goes; one that a running controller reads stays, and a foreign one always."""
    conf = tmp_path / "slurm.conf"
    head = "# a real cluster's slurm.conf\n" if case == "foreign" else conf_line(tmp_path / "gone")
    conf.write_text(head + "SlurmctldHost=n0(198.18.0.1)\n")
    before = conf.read_text()
    if case == "served":
        spawn_fake("slurmctld", os.devnull, "-D", "-f", conf)  # not ours: no pid file in our state folder
    proc = sourced(env, "main stop", conf=conf)
    assert proc.returncode == 0, proc.stderr
    assert kills(env) == []
    if case == "orphaned":
        assert not conf.exists() and "no controller of it runs" in proc.stderr
    else:
        assert conf.read_text() == before


def test_stop_ends_only_the_step_daemons_of_its_own_slurmd(env, tmp_path, spawn_fake):
    """slurmstepd detaches from slurmd; ours hold our slurmd's log open, others not."""
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    ours_log = state / "slurmd-n0.log"
    ours_log.touch()
    other_dir = tmp_path / "other-cluster"
    other_dir.mkdir()
    ours = spawn_fake("slurmstepd", ours_log)
    theirs = spawn_fake("slurmstepd", other_dir / "slurmd-n0.log")
    proc = sourced(env, "main stop", allow_kill=(ours,))
    assert proc.returncode == 0, proc.stderr
    assert kills(env) == [f"kill -TERM {ours}"]
    assert alive(theirs)
    assert not [c for c in calls(env) if c.startswith("pkill")]
    assert f"stopped leftover slurmstepd (pid {ours})" in proc.stderr


# --- the state folder ---------------------------------------------------------------


def unsafe_folder(tmp_path, problem):
    """A folder with `problem`, and the words the refusal must contain."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    if problem == "symlink":
        link = tmp_path / "link"
        link.symlink_to(real)
        return link, "is a symbolic link"
    if problem == "mode-0777":
        real.chmod(0o777)
        return real, "is writable by group or others (mode 777)"
    if problem == "group-writable":
        real.chmod(0o770)
        return real, "is writable by group or others (mode 770)"
    if problem == "other-uid":
        if not IS_ROOT:
            pytest.skip("needs root to give a folder to another uid")
        os.chown(real, OTHER_UID, OTHER_UID)
        return real, f"is owned by uid {OTHER_UID}"
    if problem == "in-world-writable-parent":
        parent = tmp_path / "open"
        parent.mkdir()
        parent.chmod(0o777)  # not sticky: anyone could rename the folder and plant another
        inner = parent / "state"
        inner.mkdir(mode=0o700)
        return inner, f"lies in {parent}, which is writable by group or others (mode 777) and not sticky"
    if problem == "in-others-parent":
        if not IS_ROOT:
            pytest.skip("needs root to give a folder to another uid")
        parent = tmp_path / "theirs"
        parent.mkdir(mode=0o755)
        inner = parent / "state"
        inner.mkdir(mode=0o700)
        os.chown(parent, OTHER_UID, OTHER_UID)
        return inner, f"lies in {parent}, which is owned by uid {OTHER_UID}"
    if problem == "a-file":
        f = tmp_path / "file"
        f.write_text("")
        return f, "is not a directory"
    raise AssertionError(problem)


PROBLEMS = ["symlink", "mode-0777", "group-writable", "other-uid", "in-world-writable-parent", "in-others-parent", "a-file"]


@pytest.mark.parametrize("command", ["start", "stop", "status"])
@pytest.mark.parametrize("problem", PROBLEMS)
def test_unsafe_state_folder_is_refused(env, tmp_path, problem, command):
    if command == "start" and not IS_ROOT:
        pytest.skip("start refuses non-root before it looks at the folder")
    folder, words = unsafe_folder(tmp_path, problem)
    # the commands themselves replaced: nothing runs unless main() lets it through
    body = f"start() {{ echo reached >>$STUB_LOG; }}; stop() {{ start; }}; status() {{ start; }}; main {command}"
    proc = sourced({**env, "DDPBENCH_SLURM_DIR": str(folder)}, body)
    assert proc.returncode == 1
    assert f"refusing state folder (DDPBENCH_SLURM_DIR) {folder}: it {words}" in proc.stderr
    assert calls(env) == []


def test_unsafe_state_folder_is_refused_when_run(env, tmp_path):
    folder, words = unsafe_folder(tmp_path, "symlink")
    proc = subprocess.run(["bash", str(SLURM), "status"], env={**env, "DDPBENCH_SLURM_DIR": str(folder)},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1
    assert f"{folder}: it {words}" in proc.stderr
    assert calls(env) == []


@pytest.mark.skipif(not IS_ROOT, reason="start needs root")
def test_start_creates_a_missing_state_folder_private(env, tmp_path):
    folder = tmp_path / "new-state"
    body = "start() { echo \"reached $DIR\" >>$STUB_LOG; }; main start"
    proc = sourced({**env, "DDPBENCH_SLURM_DIR": str(folder)}, body)
    assert proc.returncode == 0, proc.stderr
    assert calls(env) == [f"reached {folder}"]
    assert folder.is_dir() and (folder.stat().st_mode & 0o777) == 0o755 and folder.stat().st_uid == 0


def test_default_state_folder_is_not_in_a_world_writable_place():
    text = SLURM.read_text()
    assert "DIR=${DDPBENCH_SLURM_DIR:-/var/lib/ddpbench-slurm}" in text
    assert "/tmp/" not in text.split("DIR=${DDPBENCH_SLURM_DIR:-")[1].split("}")[0]


# --- no writes through symbolic links -----------------------------------------------


@pytest.mark.parametrize("link", ["slurmctld.out", "slurmctld.ourpid", "state", "conf"])
def test_no_write_through_a_symlink_in_the_state_folder(env, tmp_path, link):
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    conf = tmp_path / "etc-slurm" / "slurm.conf"
    conf.parent.mkdir()
    victim = tmp_path / ("victim-dir" if link == "state" else "victim")
    # a victim config carrying the marker: the old check (is it ours?) read it through the link
    precious = (conf_line(state) if link == "conf" else "") + "precious\n"
    if link == "state":
        victim.mkdir()
    else:
        victim.write_text(precious)
    (conf if link == "conf" else state / link).symlink_to(victim)
    # slurmd -C (stub) reports no memory line; write_conf copes
    body = "spawn slurmctld true" if link.startswith("slurmctld") else "write_conf"
    proc = sourced(env, body, conf=conf)
    assert proc.returncode != 0
    assert "is a symbolic link" in proc.stderr
    if link == "state":
        assert list(victim.iterdir()) == []
    else:
        assert victim.read_text() == precious


def test_pid_and_conf_files_are_written_fresh(env, tmp_path):
    """No symlink: the files are written, as plain files, with the expected content."""
    state = pathlib.Path(env["DDPBENCH_SLURM_DIR"])
    conf = tmp_path / "etc-slurm" / "slurm.conf"
    proc = sourced(env, 'write_conf\nspawn slurmctld true\nwait', conf=conf)
    assert proc.returncode == 0, proc.stderr
    assert conf.read_text().startswith(conf_line(state))
    assert (state / "state").is_dir() and (state / "state").stat().st_mode & 0o777 == 0o700
    pid = (state / "slurmctld.ourpid").read_text()
    assert pid.strip().isdigit() and pid.endswith("\n")
    assert not [p for p in state.iterdir() if ".ourpid." in p.name]  # no temporary left


# --- containers/build.sh's work folder ----------------------------------------------


@pytest.fixture
def build_copy(tmp_path):
    """The files build.sh reads, in a tree of their own (its outputs land there)."""
    tree = tmp_path / "repo"
    for rel in ("containers/build.sh", "scripts/private_dir.sh", "pyproject.toml"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    return tree


def run_build(env, tree, work):
    e = {**env, "STUB_RC": "1"}
    e.pop("DDPBENCH_CONTAINER_WORK", None)
    if work is not None:
        e["DDPBENCH_CONTAINER_WORK"] = str(work)
    return subprocess.run(["bash", str(tree / "containers" / "build.sh"), "--no-smoke"], env=e,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize("problem", PROBLEMS)
def test_build_refuses_an_unsafe_work_folder(env, tmp_path, build_copy, problem):
    folder, words = unsafe_folder(tmp_path, problem)
    proc = run_build(env, build_copy, folder)
    assert proc.returncode == 1
    assert f"refusing work folder (DDPBENCH_CONTAINER_WORK) {folder}: it {words}" in proc.stderr
    assert calls(env) == []  # refused before any tool ran


def test_build_uses_a_safe_work_folder(env, tmp_path, build_copy):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    proc = run_build(env, build_copy, work)
    assert "refusing" not in proc.stderr
    assert f" --variant=minbase bookworm {work}/rootfs-bookworm " in " ".join(calls(env))


def test_build_default_work_folder_is_fresh_private_and_removed(env, build_copy):
    proc = run_build(env, build_copy, None)
    assert "refusing" not in proc.stderr
    (line,) = [c for c in calls(env) if c.startswith("debootstrap ")]
    rootfs = pathlib.Path(line.split()[4])
    work = rootfs.parent
    assert work.name.startswith("ddpbench-containers.") and work.name != "ddpbench-containers"
    assert f"work-folder 700 {os.geteuid()}" in calls(env)  # made by mktemp -d: ours, private
    assert not work.exists()  # removed on exit
