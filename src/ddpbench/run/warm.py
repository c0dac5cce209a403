"""A warm start for CPU cells: the cell's zygote is forked from a server that already imported
torch and the harness, instead of starting as a new interpreter that imports them (about 2 s of
a run's 4.6 s on 2 cores: benchmarks/run_phases.py, benchmarks/warm_start.py).

The cold path (ddpbench.run.torchrun): the launcher starts `python -m ddpbench.run.torchrun`
(T) in a session of its own; T spawns multiprocessing's fork server (the zygote, Z), which
imports torch; torchrun's agent and the ranks are forked from Z. The warm path changes only
where Z comes from: T asks a server (W) to fork one, and W's child runs the same fork-server
loop (`multiprocessing.forkserver.main`) on a listener and an "alive" pipe that T made, exactly
as a spawned Z would. Nothing else is shared between cells: W is never used itself, and each Z

- takes T's environment, working folder, umask and standard streams (train.log), so the ranks see
  what a cold start gives them (their threads are set by the rank: ddpbench.run.rank);
- is in a session of its own, which T's signal handler reaches: the launcher's SIGTERM to T's
  group is passed to Z's group (Z and the agent; the ranks, each in a session of its own, die with
  Z, their parent, as in a cold start);
- exits when T does, however T ends (the alive pipe: its write end is T's alone), and the agent
  with it (its parent-death signal), so a SIGKILLed cell leaves nothing behind.

W is reused only where a cold zygote would be the same process: the key of a server is the
interpreter, the modules it imports, the code's files, the environment a cold zygote would
import with (`IMPORT_ENV`), the working folder where it holds modules (`shadows_imports`), the user, the namespaces, the cgroups, the CPU affinity, the nice
value and the resource limits. W is started by the first T that needs it (which then waits for
it: a first run costs what a cold one does), inherits that T's cgroups (so a memory-limited
cell's zygote stays limited), and exits after `IDLE_S` without a request, when its socket is
removed, or when more than `MAX_SERVERS` servers share the folder (the least recently used
goes). Its folder
is private (mode 0700, this user's); it answers only this user (SO_PEERCRED), and reads JSON,
never a pickle.

`DDPBENCH_WARM_START=0` starts every cell cold. Anything that stops a warm start (no folder, a
server that will not start) falls back to a cold start, said in train.log.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ddpbench.core import safe_io

SWITCH_ENV = "DDPBENCH_WARM_START"  # "0": every cell starts cold
FOLDER_ENV = "DDPBENCH_WARM_FOLDER"  # where the servers live (default: a private folder in the temp dir)
IDLE_S = 120.0  # a server with no request for this long exits
READY_S = 180.0  # how long the first run waits for its server's imports before starting cold
MAX_SERVERS = 6  # servers kept per folder (0.3-0.7 GB each); the least recently used goes first
#: The environment a zygote's imports can read (the interpreter's, the loader's, the locale, the
#: thread pools', torch's and its libraries', the temp and cache folders, the harness's own) is in
#: the key; the rest (a test's name, a job's id) is given to each zygote as is, never imported with.
IMPORT_ENV = (
    "PYTHON", "LD_", "LC_", "LANG", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "TORCH", "PYTORCH_", "CUDA",
    "NCCL_", "GLOO_", "TRITON_", "XDG_", "HOME", "TMPDIR", "TEMP", "TMP", "PATH", "VIRTUAL_ENV", "DDPBENCH_",
)  # fmt: skip
#: Harness variables a run sets for itself, read at run time only (the launcher's per-run ones).
PER_RUN_ENV = (
    "DDPBENCH_TIMELINE", "DDPBENCH_LAUNCH_COMMAND", "DDPBENCH_GROUP_STORE", "DDPBENCH_INJECT", "DDPBENCH_FILL",
    "DDPBENCH_ALLOW_OVERSUBSCRIBE", "DDPBENCH_JOB_ID", "DDPBENCH_PROGRESS", "DDPBENCH_WARM_FOLDER",
)  # fmt: skip
MESSAGE_BYTES = 1 << 20
LENGTH = struct.Struct("!I")


class Unavailable(RuntimeError):
    """A warm start cannot be had here (the reason is said, and the cell starts cold)."""


# ---------------------------------------------------------------- the key


def import_environment(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(IMPORT_ENV) and k not in PER_RUN_ENV}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def code_stamp(preload: list[str]) -> list:
    """The files the preloaded modules come from: every file of the harness's package (size and
    change time: an edited file makes a new server), each other package's entry file."""
    import importlib.util

    import ddpbench

    stamp = []
    for folder, _, files in os.walk(Path(ddpbench.__file__).parent):
        for name in sorted(files):
            if name.endswith((".py", ".json")):
                info = os.stat(os.path.join(folder, name))
                stamp.append((os.path.join(folder, name), info.st_size, info.st_mtime_ns))
    for top in sorted({name.split(".")[0] for name in preload} - {"ddpbench"}):
        spec = importlib.util.find_spec(top)
        if spec is not None and spec.origin:
            info = os.stat(spec.origin)
            stamp.append((spec.origin, info.st_size, info.st_mtime_ns))
    return stamp


def shadows_imports(folder: str = ".") -> bool:
    """Whether the working folder holds anything an import could take before the installed
    packages (`python -m` puts it first on sys.path): a module, or a package with __init__.py. A
    folder without either cannot (a namespace package loses to any regular one), so cells run from
    any such folder (a workflow's, a test's) share their servers."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith((".py", ".pyc", ".so")):
                    return True
                if entry.is_dir() and os.path.exists(os.path.join(entry.path, "__init__.py")):
                    return True
    except OSError:
        return True
    return False


def fingerprint(preload: list[str], env: dict[str, str]) -> dict:
    """Everything a cold zygote's state depends on besides what each zygote is given (see the
    module's docstring)."""
    namespaces = {}
    for name in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        try:
            namespaces[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            namespaces[name] = None
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}
    return {
        "python": [sys.executable, sys.version, list(sys.flags)],  # sys.path follows from these, the cwd and the env
        "preload": preload,
        "code": code_stamp(preload),
        "env": import_environment(env),
        "cwd": os.getcwd() if shadows_imports() else None,
        "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())],
        "cgroup": _read("/proc/self/cgroup"),
        "namespaces": namespaces,
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "limits": limits,
    }


def key(preload: list[str], env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(fingerprint(preload, env), sort_keys=True).encode()).hexdigest()[:20]


# ---------------------------------------------------------------- the folder


def default_folder() -> Path:
    return Path(os.environ.get(FOLDER_ENV) or Path(tempfile.gettempdir()) / f"ddpbench-warm-{os.getuid()}")


def folder() -> Path:
    """This user's private folder of servers, made if missing, refused unless it is a real folder
    owned by this user that no one else can enter."""
    path = default_folder()
    try:
        return safe_io.private_dir(path)
    except (OSError, safe_io.UnsafePathError) as err:
        raise Unavailable(str(err)) from err


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1") != "0"


def retire_all(where: Path | None = None) -> int:
    """Remove every server's socket in the folder: each exits within a second (its cells go on).
    For a caller whose cells ran in a cgroup it is about to remove. Returns how many there were."""
    where = where or default_folder()
    socks = list(where.glob("*.sock")) if where.is_dir() else []
    for path in socks:
        path.unlink(missing_ok=True)
    return len(socks)


# ---------------------------------------------------------------- the cell's side (T)


def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [LENGTH.pack(len(data)) + data], list(fds))


def _receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    if max_fds:
        data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES + LENGTH.size, max_fds)
    else:
        data, fds = sock.recv(MESSAGE_BYTES + LENGTH.size), []
    if len(data) < LENGTH.size:
        raise ConnectionError("no answer")
    (size,) = LENGTH.unpack_from(data)
    if size > MESSAGE_BYTES:
        raise ConnectionError("message too long")
    while len(data) < LENGTH.size + size:
        more = sock.recv(LENGTH.size + size - len(data))
        if not more:
            raise ConnectionError("message cut short")
        data += more
    return json.loads(data[LENGTH.size :]), fds


@contextlib.contextmanager
def _short(path: Path) -> Iterator[str]:
    """`path` by a name short enough for a Unix socket's address (108 bytes, however deep the
    folder): through its folder's descriptor, /proc/self/fd/N/NAME."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        with _short(path) as address:
            sock.connect(address)
        return sock
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None


def _start_server(where: Path, name: str, preload: list[str]) -> None:
    """Start the server for key `name` (detached: a session of its own, its output in its folder's
    log) and wait until it listens; a server that exits first is said with its log's end."""
    import subprocess

    env = import_environment(dict(os.environ))  # all it imports with; each zygote gets its cell's whole one
    log = where / f"{name}.log"
    with safe_io.open_log(log) as out:
        server = subprocess.Popen(
            [sys.executable, "-m", __name__, str(where), name, *preload], env=env, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise Unavailable(f"its server exited ({server.returncode}): {_read(str(log))[-500:].strip()}")
        if (where / f"{name}.sock").exists():
            return
        time.sleep(0.05)
    raise Unavailable(f"its server was not ready within {READY_S:.0f} s")


def _retire_oldest(where: Path, keep: str) -> None:
    """Remove the sockets of the least recently used servers beyond MAX_SERVERS - 1 (each exits on
    seeing its socket gone), keeping `keep`'s."""
    socks = sorted(where.glob("*.sock"), key=lambda p: p.stat().st_mtime if p.exists() else 0)
    others = [p for p in socks if p.stem != keep]
    for path in others[: max(0, len(others) - (MAX_SERVERS - 1))]:
        path.unlink(missing_ok=True)


def zygote(preload: list[str]) -> int:
    """Have a server fork this cell's zygote and point multiprocessing's fork server at it (as
    `multiprocessing.forkserver.ensure_running` would after spawning one); return the zygote's pid,
    the leader of its process group. Raises Unavailable (the cell then starts cold)."""
    from multiprocessing import connection, forkserver

    where = folder()
    name = key(preload, dict(os.environ))
    path = where / f"{name}.sock"
    sock = _connect(path)
    if sock is None:
        with safe_io.open_log(where / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one first run starts the server; the others wait for it
            sock = _connect(path)
            if sock is None:
                path.unlink(missing_ok=True)  # a dead server's
                _retire_oldest(where, name)
                _start_server(where, name, preload)
                sock = _connect(path)
    if sock is None:
        raise Unavailable("its server does not answer")
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # the zygote's alive pipe: its write end is this process's alone
    with sock, listener:
        request = {"key": name, "env": dict(os.environ), "cwd": os.getcwd(), "umask": _umask()}
        _send(sock, request, [0, 1, 2, listener.fileno(), alive_r])
        os.close(alive_r)
        answer, _ = _receive(sock)
    if "pid" not in answer:
        os.close(alive_w)
        raise Unavailable(answer.get("error", "no zygote"))
    # The clients' alive fd (handed to every process forked from the zygote) is another pipe's,
    # so that the zygote's own exit follows this process alone.
    clients_r, clients_w = os.pipe()
    os.close(clients_r)
    state = forkserver._forkserver
    state._forkserver_address, state._forkserver_alive_fd = address, clients_w
    state.ensure_running = lambda: None  # it runs (the resource tracker starts on first use)
    global _keep_alive
    _keep_alive = alive_w
    return answer["pid"]


_keep_alive: int | None = None  # the zygote's alive pipe, held open until this process exits


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- the server (W) and the zygote (Z)


def serve(where: Path, name: str, preload: list[str]) -> None:
    """Import `preload`, check that this process is the one key `name` describes, listen on
    WHERE/NAME.sock and fork a zygote for each request until idle, retired or signalled."""
    if key(preload, dict(os.environ)) != name:  # before the imports, as the cell's process computed it
        raise SystemExit(f"this server's state does not match key {name}: not serving")
    for module in preload:
        __import__(module)
    os.chdir("/")  # holds no cell's folder (each zygote goes to its own)
    path = where / f"{name}.sock"
    listener = socket.socket(socket.AF_UNIX)
    temporary = where / f"{name}.{os.getpid()}.tmp"
    with _short(temporary) as address:
        listener.bind(address)
    os.chmod(temporary, 0o600)
    listener.listen()
    safe_io.move(temporary, path)  # listening before it is seen
    mine = os.stat(path).st_ino
    last = time.monotonic()
    while time.monotonic() - last < IDLE_S:
        ready, _, _ = select.select([listener], [], [], 1.0)
        _reap()
        try:
            if os.stat(path).st_ino != mine:
                return  # retired, or replaced
        except FileNotFoundError:
            return
        if ready:
            conn, _ = listener.accept()
            with conn:
                _answer(conn, listener, name)
            last = time.monotonic()
            os.utime(path)  # recently used (MAX_SERVERS retires the oldest)
    path.unlink(missing_ok=True)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _answer(conn: socket.socket, listener: socket.socket, name: str) -> None:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    if uid != os.getuid():
        return
    conn.settimeout(10)
    fds: list[int] = []
    try:
        request, fds = _receive(conn, max_fds=5)
        if request.get("key") != name or len(fds) != 5:
            _send(conn, {"error": "the request is not for this server"})
            return
        sys.stdout.flush()
        sys.stderr.flush()
        settled_r, settled_w = os.pipe()  # closed by the child once it is the cell's zygote
        pid = os.fork()
        if pid == 0:
            try:
                os.close(settled_r)
                listener.close()
                conn.close()
                _become_zygote(request, fds, settled_w)
            finally:
                os._exit(1)
        os.close(settled_w)
        os.read(settled_r, 1)  # answered once it leads its group: the cell's signals reach it from the start
        os.close(settled_r)
        _send(conn, {"pid": pid})
    except (OSError, ValueError, ConnectionError):
        pass
    finally:
        for fd in fds:
            os.close(fd)


def _become_zygote(request: dict, fds: list[int], settled: int) -> None:
    """In the forked child: lead a session of its own, take the cell's streams, environment,
    folder and umask, say so (close `settled`), then run multiprocessing's fork-server loop on the
    cell's listener and alive pipe (never returns)."""
    from multiprocessing import forkserver

    os.setsid()
    stdin, stdout, stderr, listener_fd, alive_r = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from the cell's environment
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    os.close(settled)
    try:
        forkserver.main(listener_fd, alive_r, [], None, None)  # exits when the cell's T is gone
    except SystemExit:
        pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
