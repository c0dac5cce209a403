"""What a grid will measure, said before it runs: the warnings a newcomer needs.

The workflow calls `warnings(cells, ...)` while planning (so `snakemake -n` and
scripts/main.sh print them before any run). The first line is the grid's estimated wall
time (ddpbench.plan.estimate); each warning after it names the cells and the setting to
change:

- timed steps each run gets with the current timing settings, and the cells that
  `max_steps` caps below `min_timed_steps`;
- DDP cells (strategies that overlap their buckets with backward, base.Strategy.overlaps_buckets)
  whose bucket is at least the model's whole gradient (one all-reduce per step: nothing to overlap);
- scaling-law fits the grid's world sizes cannot support, with what to add;
- training settings that measure something else than the user likely means: bf16 or fp16
  on a CPU (this machine's) without native arithmetic for it (emulated: slower than
  fp32), AdamW at an SGD-sized learning rate (likely diverges), a language model on CUDA whose
  vocabulary is not a multiple of 64 (its head's matmul falls back to slow unaligned kernels).

Pure Python (no torch): gradient sizes come from the committed catalog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from ddpbench.core.params import CellParams
from ddpbench.plan import catalog
from ddpbench.plan.estimate import RunEstimate, time_estimate, timed_steps
from ddpbench.strategies import strategy_traits

PREFIX = "ddpbench plan: "
# Low precisions and the CPU flags (/proc/cpuinfo: x86 "flags", Arm "Features") that give a
# CPU native arithmetic in them. Without one, autocast's bf16/fp16 CPU kernels convert to and
# from fp32 around fp32 arithmetic: slower than fp32, not faster.
NATIVE_CPU_FLAGS = {
    "bf16": ("avx512_bf16", "amx_bf16", "bf16"),
    "fp16": ("avx512_fp16", "amx_fp16", "asimdhp"),
}
# AdamW moves each parameter by about lr a step whatever its gradient's size, so an SGD-sized lr
# (the default 0.05) blows the weights up; AdamW's usual lr is 1e-4..1e-3.
ADAMW_MAX_LR = 0.01


NAMED = ("strategy", "world_size", "batch_size", "model", "dataset_size")  # what _name says of every cell


def _name(p: dict[str, Any], also: Iterable[str] = ()) -> str:
    name = f"{p['strategy']} p={p['world_size']} batch {p['batch_size']} {p['model']} n={p['dataset_size']}"
    return name + "".join(f" {k}={p.get(k)}" for k in also)


def _some(cells: list[dict[str, Any]], n: int = 3) -> str:
    """The first `n` of `cells` by name, each once: the settings that tell them apart besides
    NAMED are named too (the sharding preset's ddp cells differ in precision and grad_accum: by
    NAMED alone one warning named "ddp p=2 batch 64 mlp n=1024" three times)."""
    also = [k for k in (cells[0] if cells else ()) if k not in NAMED and len({str(p.get(k)) for p in cells}) > 1]
    names = list(dict.fromkeys(_name(p, also) for p in cells))
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def step_warnings(cells: list[dict[str, Any]]) -> list[str]:
    counts = [(timed_steps(p), p) for p in cells]
    known = [(n, p) for n, p in counts if n is not None]
    if not known:
        return []
    p0 = known[0][1]
    lo, hi = min(n for n, _ in known), max(n for n, _ in known)
    lines = [
        f"timed steps per run: {lo if lo == hi else f'{lo}-{hi}'} before min_timed_s "
        f"({float(p0['min_timed_s']):g} s) adds any (min_timed_steps {p0['min_timed_steps']}, "
        f"warmup_steps {p0['warmup_steps']}, max_steps {p0.get('max_steps') or 'none'})"
    ]
    short = [p for n, p in known if n < int(p["min_timed_steps"])]
    if short:
        lines.append(
            f"{len(short)} cell(s) get fewer than min_timed_steps timed steps because max_steps caps them "
            f"({_some(short)}): raise timing.max_steps"
        )
    return lines


def bucket_warnings(cells: list[dict[str, Any]]) -> list[str]:
    one_bucket: dict[tuple, list] = {}
    for p in cells:
        if not strategy_traits(p["strategy"]).overlaps_buckets or int(p["world_size"]) < 2:
            continue
        shape = p["dataset"] if p["dataset"] != "synthetic" else p.get("synthetic_shape", "cifar10")
        grad = catalog.gradient_bytes(p["model"], shape)
        if grad and float(p["bucket_mb"]) * 2**20 >= grad:
            one_bucket.setdefault((p["model"], shape, grad, float(p["bucket_mb"])), []).append(p)
    return [
        f"{len(found)} {'/'.join(sorted({p['strategy'] for p in found}))} cell(s) have bucket_mb {mb:g} >= the whole "
        f"gradient of {model} on {shape} ({grad / 2**20:.2f} MiB): one all-reduce per step, nothing to overlap "
        f"({_some(found)}); set params.bucket_mb below {grad / 2**20 / 4:.2g} for about 4 buckets"
        for (model, shape, grad, mb), found in one_bucket.items()
    ]


def fit_warnings(cells: list[dict[str, Any]]) -> list[str]:
    lines = []
    for scaling in sorted({p.get("scaling", "strong") for p in cells}):
        worlds = sorted({int(p["world_size"]) for p in cells if p.get("scaling", "strong") == scaling})
        above = [w for w in worlds if w > 1]
        if scaling == "weak" and len(above) < 2:
            lines.append(
                f"weak scaling with world sizes {worlds}: Gustafson's fit needs 2 world sizes above 1, "
                "the communication cost model 3: add world sizes (e.g. 4, with allow_oversubscribe on few cores)"
            )
        elif scaling != "weak" and len(set(worlds) | {1}) < 3:
            lines.append(
                f"strong scaling with world sizes {worlds}: Amdahl's fit and the cost model need 3 distinct world "
                "sizes (1 counts, through the baseline): add world sizes (e.g. 4, with allow_oversubscribe on few cores)"
            )
    return lines


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """This machine's CPU flags (x86 "flags", Arm "Features"), None where unknown (no /proc/cpuinfo)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags) if flags else None


def precision_warnings(cells: list[dict[str, Any]], flags: frozenset[str] | None) -> list[str]:
    """bf16/fp16 CPU cells when this CPU (`flags`) has no native arithmetic for them (None: unknown, no warning)."""
    if flags is None:
        return []
    lines = []
    for precision, native in NATIVE_CPU_FLAGS.items():
        found = [p for p in cells if p.get("device", "cpu") == "cpu" and p.get("precision", "fp32") == precision]
        if found and not flags & set(native):
            lines.append(
                f"{len(found)} cell(s) train in {precision} on CPU ({_some(found)}), and this machine's CPU has none of "
                f"{'/'.join(native)} in /proc/cpuinfo: {precision} is emulated (converted to and from fp32 around fp32 "
                f"arithmetic), slower than fp32; compare it with fp32 here, or run it on a CPU with one of these flags or on CUDA"
            )
    return lines


def optimizer_warnings(cells: list[dict[str, Any]]) -> list[str]:
    """AdamW at an SGD-sized learning rate."""
    adamw = [p for p in cells if p.get("optimizer", "sgd") == "adamw"]
    lines = []
    high = [p for p in adamw if float(p["lr"]) > ADAMW_MAX_LR]
    if high:
        lrs = ", ".join(f"{lr:g}" for lr in sorted({float(p["lr"]) for p in high}))
        lines.append(
            f"{len(high)} adamw cell(s) have lr {lrs} (> {ADAMW_MAX_LR:g}; {_some(high)}): AdamW moves each parameter by "
            f"about lr a step whatever its gradient, so this likely diverges (extra.training_health will say); "
            f"AdamW's usual lr is 1e-4 to 1e-3: set params.lr (its default {CellParams().lr:g} is SGD's)"
        )
    return lines


VOCAB_MULTIPLE = 64  # nanoGPT pads GPT-2's 50,257 to 50,304


def vocab_warnings(cells: list[dict[str, Any]]) -> list[str]:
    """Language-model cells on CUDA with a vocabulary that is not a multiple of VOCAB_MULTIPLE."""
    odd = [p for p in cells if p.get("device", "cpu") == "cuda" and p.get("dataset") == "synthetic_tokens"
           and int(p.get("vocab_size", CellParams().vocab_size)) % VOCAB_MULTIPLE]  # fmt: skip
    if not odd:
        return []
    vocabs = sorted({int(p["vocab_size"]) for p in odd})
    sizes = ", ".join(f"{v:,}" for v in vocabs)
    padded = ", ".join(f"{-(-v // VOCAB_MULTIPLE) * VOCAB_MULTIPLE:,}" for v in vocabs)
    return [
        f"{len(odd)} CUDA cell(s) have vocab_size {sizes} ({_some(odd)}), not a multiple of {VOCAB_MULTIPLE}: the head's "
        f"matmul then falls back to unaligned kernels (GPT-2 small on an H200: 261k tokens/s compiled at 50,257 against "
        f"439k at 50,304; docs/gpu.md); set params.vocab_size to {padded}, as nanoGPT pads GPT-2's vocabulary"
    ]


def warnings(
    cells: Iterable[dict[str, Any]], repeats: int | str, runs_to_do: int, results: Path, flags: frozenset[str] | None = None,
    estimate: RunEstimate | None = None,
) -> list[str]:
    """Every plan line, each starting with PREFIX (`flags`: this CPU's, read from /proc/cpuinfo when None;
    `estimate`: a run's, estimate.run_estimate's when None)."""
    cells = list(cells)
    lines = [time_estimate(cells, repeats, runs_to_do, results, estimate=estimate)]
    lines += step_warnings(cells) + bucket_warnings(cells) + fit_warnings(cells)
    lines += precision_warnings(cells, cpu_flags() if flags is None else flags) + optimizer_warnings(cells)
    lines += vocab_warnings(cells)
    return [PREFIX + line for line in lines]
