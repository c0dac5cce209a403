"""How noisy is this machine, before any harness? A fixed single-thread matrix loop (NumPy, no
torch, no communication, no ddpbench) timed in short bursts, in several fresh processes one after
another: the spread inside a process and between processes is what the machine itself adds to
every run measured on it.

    python benchmarks/host_noise.py [--processes 16] [--bursts 10] [--size 256]

Each process multiplies two size x size float32 matrices 40 times a burst (about 20 ms on one
core of the 2-core VM), after one untimed burst, and prints each burst's rate. Printed at the end:
per process its median rate and its slowest burst against the median; over the processes the
log-sd of their medians (between processes) and the median of their within-process log-sd (between
bursts), with the share of bursts slower than 0.75x their process's median.

Why: the design's questions on the default grid need hundreds of runs when the runs of one cell
differ by ~20 % from launch to launch (docs/harness.md, run length). If a loop that shares nothing
with the harness moves as much, the noise is the host's (another tenant, the hypervisor's vCPU
scheduling), and no launch change removes it: only more runs, or a quieter machine, do.

Not a test: quote the load (run it alone).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys

PROBE = r"""
import sys, time
import numpy as np
size, bursts = int(sys.argv[1]), int(sys.argv[2])
a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32) / np.float32(size ** 0.5)
c, d = a.copy(), a.copy()
def burst(n=40):
    t = time.perf_counter()
    for _ in range(n):
        np.dot(a, c, out=d)
        np.copyto(c, d)
    return n / (time.perf_counter() - t)
burst(5)
print(" ".join("%.1f" % burst() for _ in range(bursts)))
"""
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args(argv)
    import os

    env = {**os.environ, **ONE_THREAD}
    medians, within, slow, total = [], [], 0, 0
    print(f"{'process':>7}  {'median /s':>10}  {'slowest / median':>16}  bursts")
    for i in range(args.processes):
        out = subprocess.run([sys.executable, "-c", PROBE, str(args.size), str(args.bursts)], env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        rates = [float(x) for x in out.split()]
        mid = statistics.median(rates)
        logs = [math.log(r) for r in rates]
        medians.append(mid)
        within.append(statistics.stdev(logs))
        slow += sum(r < 0.75 * mid for r in rates)
        total += len(rates)
        print(f"{i:>7}  {mid:>10.0f}  {min(rates) / mid:>16.2f}  {' '.join(f'{r:.0f}' for r in rates)}")
    between = statistics.stdev(math.log(m) for m in medians)
    print(f"between processes: log-sd {between:.3f} of their medians ({min(medians):.0f} to {max(medians):.0f} /s)")
    print(f"between bursts inside a process: median log-sd {statistics.median(within):.3f}; "
          f"{slow} of {total} bursts ({100 * slow / total:.1f} %) slower than 0.75x their process's median")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
