"""The recorded environment of runs (the env_* columns of runs.csv) and how two result sets differ in it.

PROVENANCE_ROWS names the environment fields in reading order (the report's provenance section
lists them so); PER_RUN are the fields that change from run to run (when, the command, the
machine's load) and so never tell two setups apart; MEASURED the per-run measurements of the
machine summarised as ranges. `provenance_diff` sets two runs tables side by side field by
field, as `analysis.compare` reports what differs between BASE and NEW.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ddpbench.core.run_record import Env, env_label, is_env_column

# The provenance section, in reading order: (label, env column). Per-run measurements of
# the machine (load, other processes' CPU) are summarised as ranges, never listed per run.
PROVENANCE_ROWS = [
    ("host", Env.host), ("CPU model", Env.cpu_model), ("usable cores", Env.cores), ("memory [GB]", Env.ram_gb),
    ("OS", Env.os), ("kernel", Env.kernel), ("C library", Env.glibc), ("GPU", Env.gpu_name),
    ("backend", Env.backend), ("threads per rank (actual)", Env.threads_per_rank),
    ("Python", Env.python), ("torch", Env.torch), ("torchvision", Env.torchvision), ("numpy", Env.numpy),
    ("scipy", Env.scipy), ("pandas", Env.pandas), ("matplotlib", Env.matplotlib), ("psutil", Env.psutil),
    ("Snakemake", Env.snakemake), ("CUDA", Env.cuda), ("cuDNN", Env.cudnn), ("NCCL", Env.nccl),
    ("git commit", Env.git_commit), ("uncommitted changes (diff hash)", Env.git_diff_hash),
    ("code fingerprint", Env.code_fingerprint), ("lock hash (uv.lock)", Env.lock_hash),
    ("container image", Env.container_image),
]  # fmt: skip
PER_RUN = (Env.started_utc, Env.ended_utc, Env.command, Env.loadavg_start, Env.loadavg_end,
           Env.other_cpu_s, Env.other_cpu_frac, Env.off_lock)  # fmt: skip
OFF_LOCK = ("packages off the lock", Env.off_lock)  # listed after PROVENANCE_ROWS when recorded
MEASURED = [("machine load at run start (1-min average)", Env.loadavg_start),
            ("other processes' share of the CPU while timed", Env.other_cpu_frac)]  # fmt: skip
NOT_RECORDED = "(not recorded)"


def _values(s: pd.Series | None) -> str:
    if s is None:
        return NOT_RECORDED
    vals = []
    for v in pd.unique(s.dropna()):
        vals.append(_num(v) if isinstance(v, (float, np.floating)) else str(v))
    return ", ".join(sorted(vals)) if vals else NOT_RECORDED


def _span(s: pd.Series | None) -> str:
    if s is None:
        return NOT_RECORDED
    x = pd.to_numeric(s, errors="coerce").dropna()
    return NOT_RECORDED if x.empty else f"{_num(x.min())}–{_num(x.max())}" if x.min() != x.max() else _num(x.min())


def _num(x) -> str:
    x = float(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:.4g}"


def provenance_diff(base: pd.DataFrame, new: pd.DataFrame, ignored: Iterable[str] = ()) -> pd.DataFrame:
    """Every recorded environment field of either side: label, column, the values of each side
    (all distinct values, sorted), and whether they differ. The axes left out of the matching
    first (they are the change being judged), then the report's provenance rows in its order,
    then any other env_* column; per-run measurements of the machine (load) as ranges, never
    counted as a difference of setup."""
    rows = []
    for col in ignored:
        vb, vn = _values(base.get(col)), _values(new.get(col))
        rows.append(dict(label=f"{col} (not matched on)", column=col, base=vb, new=vn, differs=vb != vn, measured=False))
    known = {c for _, c in PROVENANCE_ROWS} | set(PER_RUN)
    columns = list(PROVENANCE_ROWS)
    if OFF_LOCK[1] in base or OFF_LOCK[1] in new:
        columns.append(OFF_LOCK)
    extra = [c for c in dict.fromkeys([*base.columns, *new.columns]) if is_env_column(c) and c not in known]
    columns += [(env_label(c), c) for c in extra]
    for label, col in columns:
        b, n = base.get(col), new.get(col)
        if (b is None or b.isna().all()) and (n is None or n.isna().all()):
            continue
        vb, vn = _values(b), _values(n)
        if col == OFF_LOCK[1]:
            vb, vn = (v if v != NOT_RECORDED else "none" for v in (vb, vn))
        rows.append(dict(label=label, column=col, base=vb, new=vn, differs=vb != vn, measured=False))
    for label, col in MEASURED:
        if col in base or col in new:
            rows.append(dict(label=label, column=col, base=_span(base.get(col)), new=_span(new.get(col)),
                             differs=False, measured=True))  # fmt: skip
    started = [_text_range(df) for df in (base, new)]
    if any(started):
        rows.insert(0, dict(label="measured (UTC)", column=Env.started_utc, base=started[0] or NOT_RECORDED,
                            new=started[1] or NOT_RECORDED, differs=False, measured=True))  # fmt: skip
    return pd.DataFrame(rows, columns=["label", "column", "base", "new", "differs", "measured"])


def _text_range(df: pd.DataFrame) -> str:
    if Env.started_utc not in df or df[Env.started_utc].isna().all():
        return ""
    s = df[Env.started_utc].dropna().astype(str)
    return f"{s.min()} – {s.max()}"
