"""The warm start's server, key and folder (ddpbench.run.warm), without torch: a server that
preloads nothing forks real zygotes here. tests/faults/test_faults.py runs warm cells end to end."""

import os
import time
from multiprocessing import forkserver

import pytest

from ddpbench.core import safe_io
from ddpbench.run import warm


def test_the_key_follows_what_a_zygote_imports_with_not_what_each_run_is_given():
    env = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "PYTEST_CURRENT_TEST": "a"}
    base = warm.key(["json"], env)
    assert warm.key(["json"], {**env, "PYTEST_CURRENT_TEST": "b", "DDPBENCH_INJECT": "slow:1:1"}) == base
    assert warm.key(["json"], {**env, "DDPBENCH_TIMELINE": "{}", "DDPBENCH_LAUNCH_COMMAND": "x"}) == base
    assert warm.key(["json"], {**env, "OMP_NUM_THREADS": "2"}) != base  # read when torch loads its thread pool
    assert warm.key(["json"], {**env, "LD_PRELOAD": "/x.so"}) != base
    assert warm.key(["json", "csv"], env) != base


def test_the_working_folder_is_in_the_key_only_where_it_holds_modules(tmp_path, monkeypatch):
    plain, other = tmp_path / "plain", tmp_path / "other"
    for folder in (plain, other):
        (folder / "results").mkdir(parents=True)
    monkeypatch.chdir(plain)
    base = warm.key([], {})
    monkeypatch.chdir(other)
    assert warm.key([], {}) == base  # a folder without modules shadows nothing: one server for both
    (other / "torch.py").write_text("")
    assert warm.key([], {}) != base
    (other / "torch.py").unlink()
    (other / "pkg").mkdir()
    (other / "pkg" / "__init__.py").write_text("")
    assert warm.shadows_imports() and warm.key([], {}) != base


def test_the_folder_must_be_private(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    monkeypatch.setenv(warm.FOLDER_ENV, str(shared))
    with pytest.raises(warm.Unavailable, match="not a private folder"):
        warm.folder()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(safe_io.UnsafePathError):
        safe_io.private_dir(link)
    monkeypatch.setenv(warm.FOLDER_ENV, str(tmp_path / "new"))
    assert warm.folder() == tmp_path / "new" and (tmp_path / "new").stat().st_mode & 0o777 == 0o700


@pytest.fixture
def client_state(tmp_path, monkeypatch):
    """This process as a cell's torchrun would be, its fork-server state restored afterwards; the
    servers' folder deeper than a Unix socket's address could name (108 bytes)."""
    folder = tmp_path / ("deep" * 15) / "warm"
    folder.parent.mkdir()
    monkeypatch.setenv(warm.FOLDER_ENV, str(folder))
    state = forkserver._forkserver
    for name in ("_forkserver_address", "_forkserver_alive_fd", "ensure_running"):
        monkeypatch.setattr(state, name, getattr(state, name))
    yield folder
    if warm._keep_alive is not None:
        os.close(warm._keep_alive)
        warm._keep_alive = None
    warm.retire_all(folder)


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z":
                return True  # exited; its parent reaps it within a second
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_zygote_is_forked_in_its_own_session_with_the_cells_folder_and_goes_with_it(client_state, tmp_path):
    os.chdir(tmp_path)
    pid = warm.zygote([])
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # its own session: T passes signals to it
    assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
    assert forkserver._forkserver._forkserver_address.startswith(("/", "\0"))
    first = warm._keep_alive
    again = warm.zygote([])  # a second cell: the same server, another zygote
    assert again != pid and len(list(client_state.glob("*.sock"))) == 1
    os.close(warm._keep_alive)  # what the second cell's exit does, however it exits
    warm._keep_alive = first
    assert wait_gone(again)
    assert not wait_gone(pid, within_s=0.5)  # the first cell's zygote follows its own cell only
    os.close(first)
    warm._keep_alive = None
    assert wait_gone(pid)


def test_the_server_forks_nothing_for_a_request_of_another_key(client_state):
    warm.zygote([])  # starts the server
    (path,) = client_state.glob("*.sock")
    with warm._connect(path) as sock:
        r, w = os.pipe()
        warm._send(sock, {"key": "another", "env": {}, "cwd": "/", "umask": 0o22}, [r, w, r, w, r])
        answer, _ = warm._receive(sock)
        os.close(r)
        os.close(w)
    assert "pid" not in answer and "not for this server" in answer["error"]
