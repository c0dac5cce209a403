"""Matplotlib set-up and the look every figure shares: colours per strategy, data strings as text.

The only module of the figures that imports pyplot, right after `matplotlib.use("Agg")` (no
display needed, ever): the others take `plt` from here. `RC` makes the files deterministic (no
timestamps, fixed ids, text kept as text: smaller, searchable) and sets the font sizes, none
under `MIN_FONT_PT`. Each strategy has one colour and marker in every figure (`strategy_style`:
a fixed map from the sorted strategy registry to tab10 and six more; the baseline is black; names outside the
registry get a stable colour from their hash). Strings from the data (strategy names, axis
values, group labels) reach matplotlib only through `text()`: '$' escaped, so mathtext never
parses them, control characters dropped, long ones shortened.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported, here and only here
import matplotlib.pyplot as plt  # noqa: E402

from ddpbench import analysis as A  # noqa: E402


MIN_FONT_PT = 8  # no text smaller than this (the reader checks assert it)
# Deterministic files: no timestamps, fixed ids, text kept as text (smaller, searchable).
RC = {
    "svg.hashsalt": "ddpbench",
    "svg.fonttype": "none",
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "figure.labelsize": 9,
    "figure.max_open_warning": 0,  # a split grid opens many figures; make_figures closes each
}
plt.rcParams.update(RC)
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}
FORMATS = ("svg", "pdf")  # the page's and LaTeX's; a report without a PDF draws only the SVGs


LABEL_MAX = 100  # characters of a data-derived label (a legend entry); longer ones end in "…"


def text(value, limit: int = LABEL_MAX) -> str:
    """A string from the data as matplotlib text drawn literally: '$' escaped (no mathtext), control
    characters dropped, at most `limit` characters, and no leading '_' (a legend would hide the entry)."""
    s = "".join(" " if ch in "\t\n\r" else ch for ch in str(value)
                if ch in "\t\n\r" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"))  # fmt: skip
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("$", r"\$")
    return " " + s if s.startswith("_") else s


# -- one colour per strategy ---------------------------------------------------------------

MARKERS = "osD^vPX*<>p"
# The registry's colours in order: tab10, then (the registry has outgrown it: 12 strategies besides
# the baseline) colours unlike any of tab10's and of Dark2's (the colours of names outside the
# registry), so no two strategies share one.
_PALETTE = [*plt.get_cmap("tab10").colors, "#000080", "#808000", "#00ced1", "#8b0000", "#ff00ff", "#006400"]


@functools.cache  # the strategy modules do not change while a report is drawn (each call scanned the folder)
def _registry() -> list[str]:
    try:
        from ddpbench import strategies

        return sorted(strategies.names())
    except Exception:  # an unpopulated registry must not stop the figures
        return []


def strategy_style(name) -> dict:
    """Colour and marker of a strategy, the same in every figure: the sorted registry (baseline
    excepted) onto tab10 and then six more colours in order, the baseline black, other names a hash-chosen Dark2 colour."""
    name = str(name)
    if name == A.BASELINE_STRATEGY:
        return {"color": "black", "marker": "o"}
    reg = [s for s in _registry() if s != A.BASELINE_STRATEGY]
    if name in reg:
        i = reg.index(name)
        return {"color": _PALETTE[i % len(_PALETTE)], "marker": MARKERS[i % len(MARKERS)]}
    h = int(hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
    return {"color": plt.get_cmap("Dark2")(h % 8), "marker": MARKERS[(h // 8) % len(MARKERS)]}


def strategy_order(names) -> list:
    """Registry order first (as coloured), then other names sorted."""
    reg = _registry()
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda s: (0, reg.index(s), "") if s in reg else (1, 0, str(s)))


def strategy_label(name) -> str:
    return text(f"strategy={name}")


def ordered_colors(n) -> list:
    """n colours for an ordered quantity (world sizes): viridis, never a strategy's colour."""
    cmap = plt.get_cmap("viridis")
    return [cmap(0.85 * i / max(n - 1, 1)) for i in range(n)]
