"""A single-node cell offers nothing another host can reach (issue 69, item 1).

torchrun --standalone rendezvoused through a TCPStore bound to every interface, unauthenticated,
whose state the agent unpickles: a pickle written there from another address ran code in the
agent. The cell now meets in a private folder (ddpbench.run.rendezvous): while it runs, every
socket its processes listen on is bound to the loopback interface, a connection to any of them
from this machine's other address is refused, and the folder (mode 0700) is gone afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

FLAGS = [
    "--synthetic-shape", "mnist", "--dataset-size", "64", "--test-size", "16", "--batch-size", "8",
    "--max-steps", "6", "--warmup-steps", "1", "--threads-per-rank", "1", "--strategy", "ddp",
]  # fmt: skip
LISTEN = "0A"  # /proc/net/tcp's state column for a listening socket


def cell_processes(out: Path) -> list[int]:
    """The processes of the cell writing to `out`: their environment names it (the launcher's
    command, sysinfo.LAUNCH_COMMAND_ENV), or they write its train.log (a warm zygote's agent and
    ranks keep their server's starting environment: ddpbench.run.warm)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                named = str(out) in (entry / "environ").read_bytes().decode(errors="replace")
                writes = any(os.readlink(fd).startswith(f"{out}/") for fd in (entry / "fd").iterdir())
            except OSError:
                continue
            if named or writes:
                found.append(int(entry.name))
    return found


def socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


def listening(inodes: set[str]) -> list[tuple[str, int]]:
    """(local address, port) of every listening TCP socket among `inodes` (IPv4 and IPv6)."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and inode in inodes:
                address, port = local.split(":")
                found.append((decode(address, width), int(port, 16)))
    return found


def decode(hex_address: str, width: int) -> str:
    """/proc/net/tcp's address (little-endian 32-bit words) as text."""
    raw = b"".join(bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, width, 8))
    return socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, raw)


def loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


def other_address() -> str | None:
    """An address of this machine that is not loopback (what another host would connect to)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True)
    except OSError:
        return None
    for line in out.stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    return None


def test_a_running_cell_listens_on_loopback_only_and_meets_in_a_private_folder(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, DDPBENCH_INJECT="pause:0:summary")  # the group is up, the gloo pairs connected
    cmd = [sys.executable, "-m", "ddpbench.run.launch", "--nproc-per-node", "2", "--out", str(out), *FLAGS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "paused_0_summary").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (out / "paused_0_summary").exists(), proc.communicate(timeout=30)[0]
        pids = cell_processes(out)
        assert len(pids) >= 4, pids  # launcher, torchrun, agent and zygote, ranks
        sockets = listening(socket_inodes(pids))
        assert sockets, "no listening socket found: gloo's pairs listen on loopback"
        assert all(loopback(address) for address, _ in sockets), sockets
        stores = store_paths(pids)
        assert len(stores) == 1, stores  # the ranks' process group meets in one private file
        assert os.stat(stores[0].parent).st_mode & 0o777 == 0o700, stores
        address = other_address()
        for _, port in sockets if address else []:
            try:
                socket.create_connection((address, port), timeout=2).close()
                reached = True
            except OSError:
                reached = False
            assert not reached, f"{address}:{port} took a connection"
        proc.send_signal(signal.SIGINT)  # the launcher stops the cell and removes the folder
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert not stores[0].parent.exists()


def store_paths(pids: list[int]) -> list[Path]:
    """The private process-group stores the processes were given (their environment)."""
    from ddpbench.run.rendezvous import GROUP_STORE_ENV

    paths = set()
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            name, _, value = item.decode(errors="replace").partition("=")
            if name == GROUP_STORE_ENV:
                paths.add(Path(value))
    return sorted(paths)
