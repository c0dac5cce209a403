"""The communication law: a step's communication time on link ℓ as

    comm = φ_s · (α_ℓ · calls · (p − 1) + bytes / B_ℓ),      bytes = v_s(p) · M_s

α_ℓ (seconds per call and hop) and B_ℓ (bytes/s) per link: the collective sweep's all-reduce fit where
one matches the device and backend on one node, else non-negative least squares on relative error
over the runs' own calls, bytes and communication time on that link (cost_model.nnls2, every draw at
once). A link never measured but named by its rate (tc's 100mbit) takes the measured links' efficiency
(bandwidth reached / rate) and the latency of the nearest measured rate. φ_s is the strategy's
measured time against the law (geometric mean over its cells, shrunk towards 1); M_s its bytes per
step divided by its volume law v_s(p), per model and setting (message key); calls per step as measured,
scaled for another bucket size or sync period.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddpbench.analysis.cost_model import nnls2
from ddpbench.comm import commfit
from ddpbench.strategies import comm_volume_factor, strategy_settings

SHRINK = 1.0  # pseudo-cells at φ = 1 in a strategy's geometric mean


class MissingPart(ValueError):
    """A part the model needs was never measured: the message names what to run to measure it."""


@dataclass
class LinkLaw:
    alpha: dict[str, np.ndarray] = field(default_factory=dict)  # link class -> [draws]
    inv_bw: dict[str, np.ndarray] = field(default_factory=dict)  # link class -> [draws] (s per byte)
    rate_bps: dict[str, float] = field(default_factory=dict)  # link class -> the rate its cells achieved
    source: dict[str, str] = field(default_factory=dict)
    log_phi: dict[str, np.ndarray] = field(default_factory=dict)  # strategy -> [draws]
    messages: dict[str, tuple[float, pd.DataFrame]] = field(default_factory=dict)  # message key -> (M, its cells)


# Link time per byte sent, by schedule: through the root, the gather comes in and then the scatter goes out,
# one direction of the root's link at a time, where a ring sends and receives at once.
DIRECTIONS = {"root": 2.0}


def wire_bytes(cells: pd.DataFrame) -> np.ndarray:
    """Bytes per step as the link's time counts them: the busiest rank's bytes, twice through the root."""
    return cells["bytes"].to_numpy(float) * cells["schedule"].map(DIRECTIONS).fillna(1.0).to_numpy(float)


def hops(law: str, p) -> np.ndarray:
    """Latency terms per call: one per peer (ring steps, the root's messages), one for point to point."""
    p = np.asarray(p, float)
    return np.where(p > 1, 1.0 if law == "point_to_point" else p - 1, 0.0)


def sweep_links(sweep: pd.DataFrame | None) -> dict[tuple[str, str], tuple[float, float]]:
    """(device, backend) -> (α per hop, B) from the collective sweep's all-reduce (commfit's fit)."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    if sweep is None or sweep.empty:
        return out
    for (device, backend), g in sweep.groupby(["device", "backend"]):
        try:
            fit = commfit.fit_latency_bandwidth(g[g["world_size"] > 1], "all_reduce")
        except ValueError:
            continue
        p = float(g["world_size"].max())
        # commfit's α is one whole all-reduce; the law's is per hop of a 2(p−1)-step ring
        out[(str(device), str(backend))] = (fit.alpha_s / (2 * (p - 1)), fit.bandwidth_bps)
    return out


def fit(cells: pd.DataFrame, comm: np.ndarray, sweep: pd.DataFrame | None = None) -> LinkLaw:
    """The links, strategies and messages of the measured cells (`comm` [draws, cells])."""
    law = LinkLaw()
    draws = comm.shape[0]
    talk = ((cells["world_size"] > 1) & (cells["bytes"] > 0)).to_numpy()
    factor = np.array([comm_volume_factor(l, p) for l, p in zip(cells["law"], cells["world_size"])], float)
    for key, g in cells[talk].groupby("message_key"):
        m = float(np.median(g["bytes"].to_numpy() / factor[g.index.to_numpy()]))
        law.messages[key] = (m, g)  # the calls are read from the cell nearest the target's settings
    swept = sweep_links(sweep)
    n_hops = cells["calls"].to_numpy(float) * np.array([hops(l, p) for l, p in zip(cells["law"], cells["world_size"])])
    wire = wire_bytes(cells)
    for link, g in cells[talk].groupby("link_class"):
        ix = g.index.to_numpy()
        law.rate_bps[link] = float(g["link_bps"].median()) if g["link_bps"].notna().any() else np.nan
        first = g.iloc[0]
        sw = swept.get((str(first.get("device")), str(first.get("backend"))))
        if sw is not None and int(first.get("nodes", 1) or 1) == 1:
            law.alpha[link], law.inv_bw[link] = np.full(draws, sw[0]), np.full(draws, 1 / sw[1])
            law.source[link] = "the collective sweep"
            continue
        t = comm[:, ix]
        a = np.broadcast_to(np.stack([n_hops[ix], wire[ix]], axis=1), (draws, len(ix), 2))
        ok = t > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            x = nnls2(np.where(ok[..., None], a / np.where(ok, t, 1)[..., None], 0.0), np.ones_like(t), ok.astype(float))
        law.alpha[link], law.inv_bw[link] = x[:, 0], x[:, 1]
        law.source[link] = "the runs' own communication"
    base = np.zeros_like(comm)
    for i in np.flatnonzero(talk):
        link = cells["link_class"].iloc[i]
        base[:, i] = law.alpha[link] * n_hops[i] + wire[i] * law.inv_bw[link]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(comm / base)
    for s, g in cells[talk].groupby("strategy"):
        r = ratio[:, g.index.to_numpy()]
        r = np.where(np.isfinite(r), r, 0.0)
        law.log_phi[s] = r.sum(axis=1) / (r.shape[1] + SHRINK)
    return law


def link_terms(law: LinkLaw, target: pd.Series) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(α, 1/B) [draws] for the target's link, and a note where they were carried from another link."""
    link = target["link_class"]
    if link in law.alpha:
        return law.alpha[link], law.inv_bw[link], None
    rate = float(target.get("link_bps", np.nan))
    prefix = link.rsplit("/", 1)[0]
    rated = [k for k in law.alpha if k.rsplit("/", 1)[0] == prefix and np.isfinite(law.rate_bps.get(k, np.nan))]
    if not np.isfinite(rate) or not rated:
        raise MissingPart(f"no measured cell communicated over {link}: run one cell there (any strategy that "
                          "communicates), or name the link by its rate beside measured rated links")  # fmt: skip
    # efficiency: bandwidth reached per bit/s of rate; latency: the nearest measured rate's
    eff = np.median([1 / (law.inv_bw[k] * law.rate_bps[k] / 8) for k in rated], axis=0)
    near = min(rated, key=lambda k: abs(np.log(law.rate_bps[k] / rate)))
    return law.alpha[near], 8 / (eff * rate), f"link {link.rsplit('/', 1)[1]} from the measured links' efficiency"


def message(law: LinkLaw, target: pd.Series) -> tuple[float, float]:
    """(bytes, calls) per step the target sends, from its strategy's measured message."""
    got = law.messages.get(target["message_key"])
    if got is None:
        raise MissingPart(f"strategy {target['strategy']} never communicated in a measured cell of this model and "
                          "setting: run it once at world size >= 2")  # fmt: skip
    m, measured = got
    settings = strategy_settings(target["strategy"])
    ref = nearest(measured, target, [c for c in ("bucket_mb", "sync_period") if c in settings])
    calls = float(ref["calls"])
    scale = 1.0
    if "sync_period" in settings and "sync_period" in target and "sync_period" in ref:
        scale = float(ref["sync_period"]) / float(target["sync_period"])
    if "bucket_mb" in settings and "bucket_mb" in target and "bucket_mb" in ref:
        # buckets per synchronisation: as many more as the bucket is smaller, up to the whole message
        whole = m / 2**20
        periods = (float(ref.get("sync_period", 1) or 1), float(target.get("sync_period", 1) or 1)) \
            if "sync_period" in settings else (1.0, 1.0)  # fmt: skip
        per_sync = calls * periods[0] * min(float(ref["bucket_mb"]), whole) / min(float(target["bucket_mb"]), whole)
        calls = max(1.0, round(per_sync)) / periods[1]
    else:
        calls = calls * scale
    return m * comm_volume_factor(target["law"], float(target["world_size"])) * scale, calls


def nearest(cells: pd.DataFrame, target: pd.Series, settings: list[str]) -> pd.Series:
    """The cell whose settings are nearest the target's (log distance; the first where none differ)."""
    if not settings or not all(c in cells and c in target for c in settings):
        return cells.iloc[0]
    dist = sum(np.abs(np.log(pd.to_numeric(cells[c], errors="coerce").to_numpy(float) / float(target[c]))) for c in settings)
    return cells.iloc[int(np.nanargmin(np.where(np.isfinite(dist), dist, np.inf)))] if np.isfinite(dist).any() else cells.iloc[0]


def predict(law: LinkLaw, target: pd.Series) -> tuple[np.ndarray, float, list[str]]:
    """(comm [draws], calls per step, notes) for one target cell with p > 1."""
    alpha, inv_bw, note = link_terms(law, target)
    sent, calls = message(law, target)
    phi = np.exp(law.log_phi.get(target["strategy"], 0.0))
    base = alpha * calls * hops(target["law"], float(target["world_size"])) + sent * DIRECTIONS.get(target["schedule"], 1.0) * inv_bw
    return phi * base, calls, [note] if note else []
