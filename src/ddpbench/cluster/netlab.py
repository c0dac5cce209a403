"""Two "nodes" on one machine: network namespaces joined by a (shaped) veth pair.

A multi-node cell needs two hosts with their own addresses and a link between them.
`TwoNodeLab` makes them on one Linux machine (root, iproute2): two network namespaces,
a veth pair between them addressed from the benchmarking range 198.18.0.0/15
(198.18.0.1 and 198.18.0.2), loopback up in each. `Link` shapes the veth ends with a
token-bucket filter (``tc qdisc ... root tbf rate R``; this works on kernels without
netem), so the same cell can be measured over an unshaped link, 1 Gbit/s, 100 Mbit/s...
— the ``link`` launch-level setting.

`run_cell` starts ``ddpbench launch --nnodes 2`` in each namespace with a c10d
rendezvous on node 0, gloo bound to the veth interface (GLOO_SOCKET_IFNAME) and torchrun's
``--local-addr`` set through PET_LOCAL_ADDR (both namespaces share the host name, which
resolves to 127.0.0.1, so the default address would be wrong); rank 0 (node 0) writes the
summary. Each node is pinned to its half of the usable cores, as two real nodes would have
their own (ranks size their thread pools by it, the launcher judges oversubscription by it).
Before the nodes start, a short TCP probe between the namespaces measures the bandwidth the
link achieves; the summary records it (extra.link_achieved_bps) beside the set rate.
Namespaces are always deleted on exit (their veth ends go with them), also when the cell
fails, times out or is stopped by a signal; a lab whose process was SIGKILLed is swept by
the next one (its namespaces carry the dead process id).

Command line (root)::

    ddpbench netlab --link 100mbit --nproc-per-node 2 --out DIR --model mlp ...
    ddpbench netlab --link unshaped,1gbit,100mbit --out-root DIR <cell flags>

It behaves like ddpbench.run.launch (bad cell flags: exit 2 before anything starts; a
summary.json always left, status failed with the reason when a node or the lab failed;
exit 0), so a workflow rule can call it in place of the launcher for a `link` axis.

Traffic stays on loopback and on the namespace addresses; nothing outside is reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ddpbench.results import progress
from ddpbench.core import run_record, safe_io
from ddpbench.core.run_output import write_json
from ddpbench.core.run_record import EXTRA_BLOCK, read_summary

SUBNET_PREFIX = "198.18.0."  # RFC 2544 benchmarking range; never any other address
ADDRESSES = (SUBNET_PREFIX + "1", SUBNET_PREFIX + "2")
IFNAME = "ddpb0"  # the veth end's name inside each namespace
UNSHAPED = "unshaped"
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_RATE_SCALE = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_LAB_NAME = re.compile(r"^ddpb-(\d+)-n[01]$")  # a lab's namespaces: ddpb-<owner pid>-n0/n1
_LAB_VETH = re.compile(r"^ddpb(\d+)[ab]$")  # its veth ends before they move into them
PROBE_S = 0.5  # seconds of traffic the bandwidth probe aims for (the bucket's 10 ms burst: <= 2 % of it)
PROBE_BYTES = (1 << 20, 256 << 20)  # its bounds; unshaped sends the most


class NetlabError(RuntimeError):
    pass


@dataclass(frozen=True)
class Link:
    """A link setting: 'unshaped' or a tc rate such as '1gbit', '100mbit', '500kbit'."""

    name: str

    def __post_init__(self) -> None:
        if self.name != UNSHAPED and not _RATE_RE.match(self.name):
            raise ValueError(
                f"invalid value for 'link': {self.name!r}; allowed: 'unshaped' or a rate "
                "like 1gbit, 100mbit, 500kbit"
            )

    @property
    def rate_bps(self) -> float | None:
        """Bits per second, None when unshaped."""
        if self.name == UNSHAPED:
            return None
        value, unit = _RATE_RE.match(self.name).groups()  # type: ignore[union-attr]
        return float(value) * _RATE_SCALE[unit]

    def tbf_args(self) -> list[str]:
        """tc arguments of the token bucket: rate, a burst of at least 10 ms of traffic
        (and never less than 64 KiB, so a 1500-byte MTU and TSO segments fit) and a
        50 ms queue."""
        rate = self.rate_bps
        if rate is None:
            return []
        burst = max(int(rate / 8 / 100), 64 * 1024)
        return ["tbf", "rate", self.name, "burst", str(burst), "latency", "50ms"]


def _run(cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetlabError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep_stale() -> list[str]:
    """Delete what labs of dead processes left (a SIGKILLed owner cleans up nothing): their
    namespaces and veth ends still in the root namespace. Returns the names deleted."""
    gone = []
    listing = _run(["ip", "netns", "list"], check=False).stdout
    for name in (line.split()[0] for line in listing.splitlines() if line.strip()):
        m = _LAB_NAME.match(name)
        if m and not _alive(int(m.group(1))):
            _run(["ip", "netns", "del", name], check=False)
            gone.append(name)
    for dev in Path("/sys/class/net").iterdir():
        m = _LAB_VETH.match(dev.name)
        if m and not _alive(int(m.group(1))):
            _run(["ip", "link", "del", dev.name], check=False)
            gone.append(dev.name)
    return gone


def node_cpus(node: int) -> set[int] | None:
    """Node `node`'s half of the usable cores (None with one core: both share it)."""
    cores = sorted(os.sched_getaffinity(0))
    half = len(cores) // 2
    return set(cores[node * half : (node + 1) * half]) if half else None


def available() -> str | None:
    """None when a lab can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2)"
    return None


class TwoNodeLab:
    """Context manager: two namespaces joined by a veth pair, deleted on exit.

    Names carry the process id, so concurrent labs never collide; interface names
    stay within the kernel's 15 characters.
    """

    def __init__(self, tag: str | None = None):
        tag = tag or str(os.getpid())
        self.namespaces = (f"ddpb-{tag}-n0", f"ddpb-{tag}-n1")
        # Made under unique names in the root namespace, then renamed to one name inside
        # each namespace, so GLOO_SOCKET_IFNAME=ddpb0 is right on every node (what a
        # job spanning nodes, e.g. under SLURM, needs).
        self._tmp_names = (f"ddpb{tag}a"[:15], f"ddpb{tag}b"[:15])
        self.ifname = IFNAME
        self.interfaces = (IFNAME, IFNAME)
        self.addresses = ADDRESSES
        self._made: list[str] = []
        self.link = Link(UNSHAPED)

    def __enter__(self) -> "TwoNodeLab":
        reason = available()
        if reason:
            raise NetlabError(reason)
        sweep_stale()
        try:
            for ns in self.namespaces:
                _run(["ip", "netns", "add", ns])
                self._made.append(ns)
            a, b = self._tmp_names
            _run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            for ns, tmp, dev, addr in zip(self.namespaces, self._tmp_names, self.interfaces, self.addresses):
                _run(["ip", "link", "set", tmp, "netns", ns])
                _run(["ip", "-n", ns, "link", "set", "dev", tmp, "name", dev])
                _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "-n", ns, "link", "set", dev, "up"])
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Delete the namespaces this lab made (the veth pair goes with them)."""
        while self._made:
            ns = self._made.pop()
            _run(["ip", "netns", "del", ns], check=False)
        # A veth end still in the root namespace (failure between add and move).
        for dev in self._tmp_names:
            if Path(f"/sys/class/net/{dev}").exists():
                _run(["ip", "link", "del", dev], check=False)

    def shape(self, link: Link | str) -> None:
        """Shape both veth ends (egress of each) to the link's rate; unshaped removes it."""
        link = link if isinstance(link, Link) else Link(link)
        for ns, dev in zip(self.namespaces, self.interfaces):
            _run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
            if link.rate_bps is not None:
                _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *link.tbf_args()])
        self.link = link

    def qdisc(self) -> list[str]:
        return [
            _run(["tc", "-n", ns, "qdisc", "show", "dev", dev]).stdout.strip()
            for ns, dev in zip(self.namespaces, self.interfaces)
        ]

    def popen(self, node: int, cmd: Sequence[str], env: dict | None = None, **kw) -> subprocess.Popen:
        """Start a command inside node `node`'s namespace (its own process group), on the node's cores."""
        cpus = node_cpus(node)
        return subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[node], *cmd],
            env=env,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            **kw,
        )

    def probe(self, port: int) -> dict:
        """The bandwidth the link achieves: node 1 sends about PROBE_S seconds of traffic over TCP
        to node 0, which times it from its first received chunk to the last (so connection set-up
        and the first burst are not counted). Returns extra.link_* entries of the summary."""
        rate = self.link.rate_bps
        total = PROBE_BYTES[1] if rate is None else int(min(max(rate / 8 * PROBE_S, PROBE_BYTES[0]), PROBE_BYTES[1]))
        limit = 10 + (3 * total * 8 / rate if rate else 10)
        receiver = self.popen(0, [sys.executable, "-c", _RECEIVER, ADDRESSES[0], str(port)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
        sender = None
        try:
            if receiver.stdout.readline().strip() != "ready":
                raise NetlabError("bandwidth probe: the receiver did not start")
            sender = self.popen(1, [sys.executable, "-c", _SENDER, ADDRESSES[0], str(port), str(total)])
            out, _ = receiver.communicate(timeout=limit)
            sender.wait(timeout=10)
            got = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as err:
            raise NetlabError(f"bandwidth probe over {self.link.name} failed: {err!r}") from None
        finally:
            _terminate([p for p in (receiver, sender) if p is not None])
        seconds = got["seconds"]
        return run_record.extra(link_probe_bytes=got["bytes"], link_probe_s=seconds,
                                link_achieved_bps=got["bytes"] * 8 / seconds if seconds > 0 else None)  # fmt: skip

    def node_env(self, node: int, base: dict | None = None) -> dict:
        env = dict(os.environ if base is None else base)
        env["GLOO_SOCKET_IFNAME"] = self.interfaces[node]
        env["PET_LOCAL_ADDR"] = self.addresses[node]  # torchrun --local-addr
        # torchrun --rdzv-conf: node 0 hosts the c10d store. Its automatic check compares
        # the endpoint with the host name's addresses (127.0.0.1 here), so say it.
        env["PET_RDZV_CONF"] = f"is_host={1 if node == 0 else 0}"
        env.pop("NCCL_SOCKET_IFNAME", None)
        env.pop(progress.ENV, None)  # the launcher that made the lab counts the run, once
        return env


# The probe's two ends, run with the namespaces' Python: plain sockets, nothing imported.
_RECEIVER = r"""
import json, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(60)  # never outlive a lab whose owner died mid-probe by more than this
print("ready", flush=True)
c, _ = s.accept()
c.settimeout(60)
buf, n, first, last = bytearray(1 << 20), 0, None, None
while True:
    k = c.recv_into(buf)
    if not k:
        break
    now = time.perf_counter()
    if first is None:
        first, k0 = now, k
    last, n = now, n + k
c.close()
print(json.dumps({"bytes": n - k0 if first else 0, "seconds": (last - first) if first else 0.0}), flush=True)
"""
_SENDER = r"""
import socket, sys, time
host, port, left = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(200):
    try:
        c = socket.create_connection((host, port), timeout=10)
        break
    except OSError:
        time.sleep(0.05)
chunk = bytes(1 << 20)
while left > 0:
    c.sendall(chunk[: min(left, len(chunk))])
    left -= len(chunk)
c.shutdown(socket.SHUT_WR)
c.recv(1)
c.close()
"""


def _terminate(procs: Sequence[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def run_on_nodes(
    lab: TwoNodeLab,
    cmd_for_node,
    timeout_s: float,
    log_dir: Path | None = None,
) -> list[int]:
    """Run cmd_for_node(i) in each namespace at once; bounded by timeout_s. Returns the
    exit codes (124 for a node that was killed at the limit)."""
    procs, logs = [], []
    try:
        for node in range(2):
            out = subprocess.DEVNULL
            if log_dir is not None:  # a file of its own: a link planted at the name is removed, not written
                out = safe_io.open_log(log_dir / f"node{node}.log", root=log_dir.parent)
                logs.append(out)
            procs.append(
                lab.popen(node, cmd_for_node(node), env=lab.node_env(node), stdout=out, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + timeout_s
        codes: list[int | None] = [None, None]
        while any(c is None for c in codes):
            for i, p in enumerate(procs):
                codes[i] = p.poll()
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return [124 if c is None else c for c in codes]
    finally:
        _terminate(procs)
        for f in logs:
            f.close()


def launch_command(
    node: int,
    out: Path,
    nproc_per_node: int,
    cell_args: Sequence[str],
    port: int,
    nnodes: int = 2,
) -> list[str]:
    """The launcher command of one node: c10d rendezvous on node 0's address."""
    return [
        sys.executable,
        "-m",
        "ddpbench.run.launch",
        "--nproc-per-node",
        str(nproc_per_node),
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node),
        "--rdzv-endpoint",
        f"{ADDRESSES[0]}:{port}",
        "--out",
        str(out),
        "--stop-with-parent",  # a killed lab leaves no rank running (SIGTERM on the owner's death)
        *cell_args,
    ]


def run_cell(
    out: Path,
    link: Link | str = UNSHAPED,
    nproc_per_node: int = 2,
    cell_args: Sequence[str] = (),
    timeout_s: float = 600.0,
    port: int = 29400,
    lab: TwoNodeLab | None = None,
) -> dict:
    """Run one 2-node cell over a link of the given rate; return its summary.json (with the
    set rate and the probe's achieved bandwidth under "extra"). Makes (and deletes) a lab
    unless one is given."""
    out = Path(out).resolve()
    safe_io.make_dir(out)
    (out / "summary.json").unlink(missing_ok=True)  # an earlier attempt's must not pass
    own = lab is None
    lab = lab or TwoNodeLab()
    if own:
        lab.__enter__()
    try:
        lab.shape(link)
        measured = lab.probe(port + 1)
        codes = run_on_nodes(
            lab,
            lambda node: launch_command(node, out, nproc_per_node, cell_args, port),
            timeout_s=timeout_s + 60,
            log_dir=out / "netlab_logs",
        )
        summary_path = out / "summary.json"
        if not summary_path.exists():
            tails = []
            for node in range(2):
                log = out / "netlab_logs" / f"node{node}.log"
                if log.exists():
                    tails.append(f"node{node}: " + log.read_text()[-2000:])
            raise NetlabError(f"no summary.json in {out} (exit codes {codes})\n" + "\n".join(tails))
        return _tag_link(out, lab.link, measured)
    finally:
        if own:
            lab.close()


def _tag_link(out: Path, link: Link, measured: dict | None = None) -> dict:
    """Add the link's set rate (bits/s; None unshaped) and what the probe measured to a run's
    summary (atomically) and return the summary."""
    path = out / "summary.json"
    summary = read_summary(path)
    summary.setdefault(EXTRA_BLOCK, {}).update(run_record.extra(link_rate_bps=link.rate_bps, **(measured or {})))
    write_json(path, summary)
    return summary


def _write_failure(out: Path, link: Link, params, nproc_per_node: int, reason: str) -> dict:
    from ddpbench.core.run_output import write_failure

    safe_io.make_dir(out)
    write_failure(out, dataclasses.replace(params, link=link.name), nproc_per_node * 2, 2, "failed", reason[-2000:])
    return _tag_link(out, link)


def main(argv: Sequence[str] | None = None) -> int:
    """Like `ddpbench launch` (cell flags validated first, exit 2 on a bad value; a summary
    always left, exit 0), for a 2-node cell per link in namespaces."""
    from ddpbench.core.params import CellParams, ParamError

    argv = list(sys.argv[1:] if argv is None else argv)
    after: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, after = argv[:i], argv[i + 1 :]
    parser = argparse.ArgumentParser(
        prog="ddpbench netlab",
        description="Run a 2-node cell in two network namespaces over a (shaped) veth link. "
        "Cell flags are those of ddpbench launch (optionally after '--').",
    )
    parser.add_argument("--link", default=UNSHAPED, help="comma-separated: unshaped, 1gbit, 100mbit, ...")
    parser.add_argument("--nproc-per-node", type=int, default=2, help="ranks per node (world size = 2 x this)")
    parser.add_argument("--out", type=Path, help="run directory (one link)")
    parser.add_argument("--out-root", type=Path, help="one run directory per link: OUT_ROOT/link~<link>")
    parser.add_argument("--port", type=int, default=29400, help="rendezvous port on 198.18.0.1")
    args, cell_args = parser.parse_known_args(argv)
    cell_args += after
    cell_parser = argparse.ArgumentParser(prog="ddpbench netlab (cell flags)")
    CellParams.add_arguments(cell_parser)
    try:
        params = CellParams.from_namespace(cell_parser.parse_args(cell_args))
        links = [Link(x.strip()) for x in args.link.split(",") if x.strip()]
    except (ParamError, ValueError) as e:
        parser.exit(2, f"error: {e}\n")
    if (args.out is None) == (args.out_root is None):
        parser.error("give exactly one of --out (one link) or --out-root (several)")
    if args.out is not None and len(links) != 1:
        parser.error("--out takes one link; use --out-root for several")
    outs = [args.out or args.out_root / f"link~{link.name}" for link in links]
    done: dict[Path, dict] = {}
    try:
        with TwoNodeLab() as lab:
            for link, out in zip(links, outs):
                try:
                    done[out] = run_cell(out, link, args.nproc_per_node, [*cell_args, "--link", link.name],
                                         params.timeout_s + 60, args.port, lab=lab)  # fmt: skip
                except NetlabError as e:
                    done[out] = _write_failure(out, link, params, args.nproc_per_node, f"netlab: {e}")
    except NetlabError as e:  # no lab (not root, no iproute2): every run fails, each with a summary
        for link, out in zip(links, outs):
            done.setdefault(out, _write_failure(out, link, params, args.nproc_per_node, f"netlab: {e}"))
    for link, out in zip(links, outs):  # the launcher's progress line, with the link
        s = done[out]
        rate = s.get("samples_per_s")
        comm = s.get("phase_comm_s")
        line = f"[ddpbench] {out}: {s.get('status')} {f'{rate:.1f}' if rate else '-'} samples/s (link {link.name}"
        line += f", comm {comm:.3f} s)" if comm is not None else ")"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
