"""Small synthetic runs.csv / steps.csv / comm.csv with the contract's columns, for the report tests.

Times follow Amdahl with a known serial fraction plus multiplicative noise, so fits have a
known answer; a few cells fail, time out or are skipped with reasons.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd

from ddpbench import analysis
from ddpbench.core.params import CellParams

STEP_COLUMNS = [
    "step", "epoch", "rank", "timed", "data_s", "forward_s", "backward_s", "comm_s", "exposed_comm_s",
    "optimizer_s", "total_s", "loss", "samples", "comm_calls", "comm_bytes",
]  # fmt: skip


def make_runs(
    strategies=("single", "ddp", "allreduce"),
    world_sizes=(1, 2, 4, 8),
    repeats=3,
    batch_sizes=(64,),
    dataset_sizes=(4096,),
    scaling="strong",
    f=0.1,
    noise=0.03,
    failures=True,
    seed=0,
    models=None,
    others_at_1=True,
) -> pd.DataFrame:
    """Runs of every strategy x world size x batch size x dataset size (x model, when `models` names
    several: a model axis; the time of model i is (1 + 0.5 i) times model 0's) x repeat. `single`
    runs only at p = 1; other strategies too unless `others_at_1` is False (a cluster-size grid
    whose only p = 1 runs are the baseline's)."""
    rng = np.random.default_rng(seed)
    # Field defaults, not CellParams(): the strategy registry need not be populated here.
    defaults = {f.name: f.default for f in dataclasses.fields(CellParams)}
    rows = []
    for strategy in strategies:
        for p in world_sizes:
            if strategy == "single" and p != 1 or strategy != "single" and p == 1 and not others_at_1:
                continue
            for b in batch_sizes:
                for n, (mi, model) in itertools.product(dataset_sizes, enumerate(models or [None])):
                    for r in range(repeats):
                        t1 = 2.0 * n / 4096 * (1 + 0.1 * (b != 64)) * (1 + 0.5 * mi)
                        work = 1.0 if scaling == "strong" else 1.0  # epoch: fixed amount of work
                        epoch = t1 * work * (f + (1 - f) / p) * (1 + noise * rng.standard_normal())
                        gbatch = b if scaling == "strong" else b * p
                        steps = n // gbatch
                        step = epoch / steps
                        comm = 0.0 if p == 1 else step * 0.3 * (1 - 1 / p)
                        exposed = comm * (0.5 if strategy == "ddp" else 1.0)
                        row = dict(defaults, strategy=strategy, batch_size=b, dataset_size=n, scaling=scaling, seed=r)
                        if model is not None:
                            row["model"] = model
                        row.update(
                            run_dir=f"results/runs/{strategy}-p{p}-b{b}-n{n}{'' if model is None else '-' + model}/r{r}",
                            repeat=r, world_size=p, nodes=1, status="ok", reason="",
                            global_batch=gbatch, per_rank_batch=gbatch // p, total_steps=steps, timed_steps=steps - 3,
                            step_time_median_s=step, step_time_mean_s=step * 1.02, step_time_p95_s=step * 1.2,
                            samples_per_s=n / epoch, epoch_time_s=epoch, timed_wall_s=step * (steps - 3),
                            wall_time_s=epoch + 3,
                            phase_data_s=0.05 * step * (steps - 3), phase_forward_s=0.25 * step * (steps - 3),
                            phase_backward_s=0.4 * step * (steps - 3), phase_comm_s=comm * (steps - 3),
                            phase_exposed_comm_s=exposed * (steps - 3), phase_optimizer_s=0.05 * step * (steps - 3),
                            phase_total_s=step * 1.02 * (steps - 3), phase_other_s=0.02 * step * (steps - 3),
                            frac_other=0.02,
                            frac_comm=comm / step, frac_exposed_comm=exposed / step,
                            compute_comm_ratio=(0.7 * step / exposed) if exposed else None,
                            comm_calls_per_step=0 if p == 1 else 4,
                            comm_bytes_per_step=0 if p == 1 else 2 * (p - 1) / p * 4e6,
                            rank_skew=0.01 * p * (1 + 0.1 * rng.random()),
                            peak_rss_mb=500 + 2 * b + 10 * r, cuda_max_allocated_mb=None,
                            train_loss_final=1.0, train_acc_final=0.5, test_loss=1.1, test_acc=0.45, param_norm=10.0,
                            train_loss_last10_mean=1.05, train_acc_last10_mean=0.48,
                            extra_param_deviation_from_single=0.0,
                            env_host="testhost", env_cores=2, env_ram_gb=24.0, env_python="3.11.9",
                            env_torch="2.15.0", env_torchvision="0.29.2", env_cuda=None, env_cudnn=None,
                            env_nccl=None, env_gpu_name=None, env_backend="gloo", env_threads_per_rank=1,
                            env_git_commit="abc1234", env_container_image=None, env_var_OMP_NUM_THREADS="1",
                            env_loadavg_start=0.4, env_loadavg_end=1.9, env_other_cpu_frac=0.01,
                            extra_oversubscribed=False, extra_measurement_short=False,
                            extra_comm_volume="none" if strategy == "single" else "allreduce",
                        )  # fmt: skip
                        # a launch's timeline (seconds per span), as a 2-core machine measures one
                        spans = dict(launcher=0.1, torchrun=2.3, imports=3.0, process_group=0.05 * p, setup=2.7,
                                     warmup=3 * step, timed_steps=step * (steps - 3), evaluation=0.05, results=0.15,
                                     teardown=2.0 + 0.5 * (p > 1), launcher_finish=0.1)  # fmt: skip
                        row.update({f"timeline_{k}_s": v for k, v in spans.items()})
                        row.update(held_bytes(strategy, p))
                        row.update(mfu_columns(n / epoch, p))
                        row["fixed_cost_s"] = sum(spans.values()) - step * (steps - 3)
                        rows.append(row)
    runs = pd.DataFrame(rows)
    if failures:
        bad = dict(rows[-1], status="failed", reason="RuntimeError: Connection closed by peer\n<tail>", world_size=16,
                   run_dir="results/runs/x-p16/r0", repeat=0)  # fmt: skip
        late = dict(rows[-1], status="timeout", reason="exceeded timeout_s=600 (+30 s grace)", world_size=16,
                    run_dir="results/runs/x-p16/r1", repeat=1)  # fmt: skip
        skip = dict(rows[-1], status="skipped", reason="batch_size auto found no batch within memory_budget_gb",
                    strategy="pipeline", run_dir="results/runs/pipe/r0")  # fmt: skip
        counted = ("extra_param_bytes", "extra_grad_bytes", "extra_optimizer_state_bytes", "extra_held_bytes")
        metrics = [c for c in bad if c.startswith(("step_time", "samples", "epoch", "phase", "frac", "peak", *counted))]
        extra = pd.DataFrame([bad, late, skip])
        extra[metrics] = np.nan
        runs = pd.concat([runs, extra], ignore_index=True)
    return runs


# The bytes of a synthetic model's parameters (the MLP on MNIST: 535,818 fp32 parameters).
PARAM_BYTES = 2_143_272


def held_bytes(strategy: str, p: int, param_bytes: int = PARAM_BYTES, state_per_param: float = 1.0) -> dict:
    """runs.csv's held-memory columns as the harness counts them for one rank (SGD momentum: one
    state value per parameter; AdamW: state_per_param 2): zero keeps 1/p of the optimizer state,
    the FSDP strategies 1/p of everything, the others all of it."""
    params, grads, state = param_bytes, param_bytes, state_per_param * param_bytes
    if strategy == "zero":
        state /= p
    elif strategy in ("fsdp", "fsdp_grad_op"):
        params, grads, state = params / p, grads / p, state / p
    return dict(extra_param_bytes=params, extra_grad_bytes=grads, extra_optimizer_state_bytes=state,
                extra_held_bytes=params + grads + state)  # fmt: skip


FLOPS_PER_SAMPLE = 7_093_248  # the cifar10 mlp's counted training FLOPs per sample (tests/unit/test_flops.py)
PEAK_PER_RANK = 60e9  # a CPU core's measured fp32 matmul peak, roughly this machine's


def mfu_columns(samples_per_s: float, p: int, flops_per_sample: float = FLOPS_PER_SAMPLE,
                peak: float = PEAK_PER_RANK) -> dict:  # fmt: skip
    """runs.csv's MFU columns as the harness writes them on CPU (core.peaks.mfu_fields): no datasheet."""
    achieved = samples_per_s * flops_per_sample
    return dict(extra_train_flops_per_sample=flops_per_sample, extra_achieved_flops_per_s=achieved,
                extra_peak_flops_measured=peak, extra_peak_flops_datasheet=None,
                extra_peak_flops_datasheet_source=None, extra_mfu_measured=achieved / (peak * p),
                extra_mfu_datasheet=None)  # fmt: skip


def make_steps(runs: pd.DataFrame, n_steps=12) -> pd.DataFrame:
    rows = []
    ok = runs[runs["status"] == "ok"]
    for _, r in ok.iterrows():
        for rank in range(int(r["world_size"])):
            for s in range(n_steps):
                t = r["step_time_median_s"] * (1.5 if s == 0 else 1.0) * (1 + 0.02 * rank)
                rows.append(dict(
                    run_dir=r["run_dir"], repeat=r["repeat"], world_size=r["world_size"], strategy=r["strategy"],
                    batch_size=r["batch_size"], scaling=r["scaling"], model=r["model"], dataset=r["dataset"],
                    dataset_size=r["dataset_size"], device=r["device"],
                    step=s, epoch=s // 4, rank=rank, timed=int(s >= 3), data_s=0.05 * t, forward_s=0.25 * t,
                    backward_s=0.4 * t, comm_s=0.2 * t, exposed_comm_s=0.1 * t, optimizer_s=0.05 * t, total_s=t,
                    loss=2.3 * np.exp(-0.1 * s) + 0.01 * rank, samples=r["per_rank_batch"], comm_calls=4,
                    comm_bytes=1e6,
                ))  # fmt: skip
    return pd.DataFrame(rows)


PROFILE_OPS = [("aten::mm", 0, 0.30), ("aten::addmm", 0, 0.20), ("gloo:all_reduce", 1, 0.25), ("aten::add_", 0, 0.10),
               ("c10d::allreduce_", 1, 0.05)]  # fmt: skip


def make_profile(runs: pd.DataFrame) -> pd.DataFrame:
    """aggregate/profile.csv rows for the ok runs (as profiling.top_table writes them): per rank the
    operators of PROFILE_OPS (communication only where p > 1) and "other", shares of the step."""
    rows = []
    for _, r in runs[runs["status"] == "ok"].iterrows():
        step = float(r["step_time_median_s"])
        ops = [(op, comm, f) for op, comm, f in PROFILE_OPS if r["world_size"] > 1 or not comm]
        for rank in range(int(r["world_size"])):
            used = 0.0
            for op, comm, f in ops + [("other", 0, None)]:
                share = f * (1 + 0.1 * rank) if f is not None else max(0.0, 1 - used)
                used += share
                rows.append(dict(run_dir=r["run_dir"], repeat=r["repeat"], world_size=r["world_size"], strategy=r["strategy"],
                                 batch_size=r["batch_size"], scaling=r["scaling"], model=r["model"], dataset=r["dataset"],
                                 dataset_size=r["dataset_size"], device=r["device"], rank=rank, activity="cpu", op=op,
                                 comm=comm, calls=3.0, self_s_per_step=share * step, share=share))  # fmt: skip
    return pd.DataFrame(rows)


def make_comm(world_sizes=(2, 4), alpha=50e-6, bandwidth=2e9) -> pd.DataFrame:
    rows = []
    for p in world_sizes:
        for m in (2**k for k in range(10, 25, 2)):
            t = alpha + 2 * (p - 1) / p * m / bandwidth
            algbw = m / t / 1e9
            rows.append(dict(collective="all_reduce", backend="gloo", device="cpu", world_size=p, bytes=m, iters=20,
                             time_median_s=t, time_p95_s=1.1 * t, algbw_gbps=algbw,
                             busbw_gbps=algbw * 2 * (p - 1) / p))  # fmt: skip
    return pd.DataFrame(rows)


# Per strategy, a p = 2 step's communication: collective calls, bytes sent by the busiest rank, and
# whether it hides behind backward (DDP's overlap). Different proportions of calls to bytes let a
# latency-bandwidth fit tell α from B.
LINK_COMM = {"ddp": (4, 4e6, True), "allreduce": (10, 4e6, False), "gather_scatter": (16, 8e6, False)}
# Link setting -> the bits/s its probe achieves (a little under the shaped rate, as TCP does)
LINK_ACHIEVED = {"10gbit": 9.8e9, "1gbit": 0.96e9, "100mbit": 97e6, "20mbit": 19.6e6}
_UNIT = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def make_link_runs(
    strategies=("ddp", "allreduce", "gather_scatter"),
    links=None,
    alpha=100e-6,
    compute_share=0.55,
    hide_share=0.3,
    repeats=3,
    noise=0.0,
    probe_noise=0.0,
    comm=None,
    seed=0,
) -> pd.DataFrame:
    """A link study: `single` at p = 1 (link none), every strategy's loopback cell at p = 2 (nodes 1,
    link none) and its two-node cell (nodes 2, world size 2) on every link of `links` (setting ->
    achieved bits/s; default LINK_ACHIEVED).

    On a link, a step computes `compute_share` of the single step's time and communicates exactly
    comm_s = alpha·calls + bytes·8/achieved (calls, bytes per `comm`, default LINK_COMM), times
    (1 + noise·N(0, 1)); a strategy that hides behind backward exposes only what exceeds
    `hide_share` of its computation. So a non-hiding strategy's time per sample is exactly
    a + b/B with a = (compute + alpha·calls)/batch, b = 8·bytes/batch: its crossing with the single
    process is known. The probe reads achieved·(1 + probe_noise·N(0, 1))."""
    rng = np.random.default_rng(seed + 1)
    links = LINK_ACHIEVED if links is None else links
    comm = LINK_COMM if comm is None else comm
    base = make_runs(strategies=("single", *strategies), world_sizes=(1, 2), repeats=repeats, noise=noise,
                     failures=False, others_at_1=False, seed=seed)  # fmt: skip
    base["link"] = "none"
    single_step = float(base.loc[base["strategy"] == "single", "step_time_median_s"].median())
    rows = []
    for template in base[base["world_size"] == 2].to_dict("records"):
        calls, sent, hides = comm.get(template["strategy"], (4, 4e6, False))
        compute = compute_share * single_step
        timed, gbatch, n = template["timed_steps"], template["global_batch"], template["dataset_size"]
        for link, achieved in links.items():
            unit = next((u for u in _UNIT if str(link).endswith(u)), None)
            nominal = float(str(link)[: -len(unit)]) * _UNIT[unit] if unit else np.nan
            t_comm = (alpha * calls + sent * 8 / achieved) * (1 + noise * rng.standard_normal())
            exposed = max(t_comm - hide_share * compute, 0.0) if hides else t_comm
            step = compute + exposed
            row = dict(template)
            row.update(
                link=link, nodes=2, run_dir=f"results/runs/{template['strategy']}-p2-{link}/r{template['repeat']}",
                extra_link_rate_bps=nominal, extra_link_achieved_bps=achieved * (1 + probe_noise * rng.standard_normal()),
                comm_calls_per_step=calls, comm_bytes_per_step=sent,
                step_time_median_s=step, step_time_mean_s=step, step_time_p95_s=step * 1.1,
                samples_per_s=gbatch / step, epoch_time_s=n * step / gbatch, timed_wall_s=step * timed,
                phase_data_s=0.05 * compute * timed, phase_forward_s=0.35 * compute * timed,
                phase_backward_s=0.5 * compute * timed, phase_optimizer_s=0.1 * compute * timed,
                phase_comm_s=t_comm * timed, phase_exposed_comm_s=exposed * timed, phase_total_s=step * timed,
                phase_other_s=0.0, frac_other=0.0, frac_comm=t_comm / step, frac_exposed_comm=exposed / step,
                compute_comm_ratio=compute / exposed if exposed else None,
            )  # fmt: skip
            rows.append(row)
    return pd.concat([base, pd.DataFrame(rows)], ignore_index=True)


SHARDING_STRATEGIES = ("single", "ddp", "zero", "fsdp_grad_op", "fsdp")


def make_sharding_runs(slowdown=None, precisions=("fp32", "bf16"), grad_accums=(1, 4), bf16_speedup=1.25, repeats=3,
                       noise=0.03, param_bytes=PARAM_BYTES, state_per_param=2.0, seed=0, compiles=("none",),
                       compile_speedup=2.0) -> pd.DataFrame:  # fmt: skip
    """The sharding study's grid (configs/studies/sharding.yaml): `single` at p = 1 and ddp, zero,
    fsdp_grad_op, fsdp at p = 2, at every precision x grad_accum, AdamW (two state values per
    parameter). Each strategy's epoch takes `slowdown[strategy]` times ddp's (default: zero as ddp,
    fsdp_grad_op 1.3x, fsdp 1.5x), bf16 `bf16_speedup` times faster than fp32; held bytes as the
    harness counts them (`held_bytes`); with several `compiles`, compile=model `compile_speedup` times faster."""
    slowdown = {"zero": 1.0, "fsdp_grad_op": 1.3, "fsdp": 1.5} if slowdown is None else slowdown
    frames = []
    for i, (precision, accum, compiled) in enumerate(itertools.product(precisions, grad_accums, compiles)):
        r = make_runs(strategies=SHARDING_STRATEGIES, world_sizes=(1, 2), repeats=repeats, noise=noise, failures=False,
                      others_at_1=False, seed=seed + i)  # fmt: skip
        r["precision"], r["grad_accum"], r["optimizer"], r["lr"] = precision, accum, "adamw", 0.001
        r["compile"] = compiled
        r["run_dir"] = r["run_dir"].str.replace("/r", f"-{precision}-a{accum}-c{compiled}/r", regex=False)
        f = r["strategy"].map(lambda s: slowdown.get(s, 1.0)) / (bf16_speedup if precision == "bf16" else 1.0)
        f /= compile_speedup if compiled != "none" else 1.0
        r["samples_per_s"] /= f
        for col in ("epoch_time_s", "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "timed_wall_s"):
            r[col] *= f
        held = pd.DataFrame([held_bytes(s, p, param_bytes, state_per_param) for s, p in zip(r["strategy"], r["world_size"])],
                            index=r.index)  # fmt: skip
        r[held.columns] = held
        frames.append(r)
    return pd.concat(frames, ignore_index=True)


TOKEN_STRATEGIES = ("single", "ddp", "fsdp", "bucketed_allreduce")
TOKEN_CELLS = ((128, 64), (512, 16))  # (seq_len, batch_size): 8,192 tokens per step each
GPT_TINY_FLOPS_PER_TOKEN = 6 * 460_000  # ~6 x parameters (gpt_tiny: 0.46 M)


def make_token_runs(slowdown=None, longer=0.8, comm_longer=0.5, repeats=3, noise=0.03, vocab_size=256,
                    final_loss=1.2, peak=5e12, seed=0, compiled=None, compile_s=30.0,
                    checkpointed=None) -> pd.DataFrame:  # fmt: skip
    """The language-model study's grid (configs/studies/language-model.yaml): gpt_tiny on synthetic_tokens,
    `single` at p = 1 and ddp, fsdp, bucketed_allreduce at p = 2, at seq_len 128 x batch 64 and 512 x 16.
    Each strategy's epoch takes `slowdown[strategy]` times its own (default: fsdp 1.4x, the others 1x); at
    seq_len 512 the tokens/s are `longer` times those at 128 and the communication shares `comm_longer`
    times; tokens_per_s = samples_per_s x seq_len, MFU columns as the harness writes them on CPU.
    `compiled`: (compute speedup, comm share factor) to add every cell again at compile=model, its
    steps that much faster and its communication share that much larger (compute shrank, the bytes
    did not); the first set is compile=none. A compiled run's first step took `compile_s` (+ 1 s per
    repeat) beyond a timed one, in 12 graphs (extra_compile_s, extra_compiled_graphs).
    `checkpointed`: (throughput factor, peak factor) to add every cell again at
    activation_checkpointing=full, its throughput and peak RSS that much times its twin's and its HFU
    4/3 of its MFU (the forward recomputed in the backward: 4 of the model's 3 passes); the first set
    is activation_checkpointing=none, its HFU its MFU."""
    slowdown = {"fsdp": 1.4} if slowdown is None else slowdown
    args = (slowdown, longer, comm_longer, repeats, noise, vocab_size, final_loss, peak)
    if checkpointed is not None:
        plain = make_token_runs(*args, seed, compiled, compile_s)
        full = make_token_runs(*args, seed + 20, compiled, compile_s)
        slower, smaller = checkpointed
        full["run_dir"] = full["run_dir"].str.replace("/r", "-ckpt/r", regex=False)
        for col in ("samples_per_s", "tokens_per_s", "extra_achieved_flops_per_s", "extra_mfu_measured"):
            full[col] *= slower
        for col in ("epoch_time_s", "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "timed_wall_s"):
            full[col] /= slower
        full["peak_rss_mb"] *= smaller
        full["extra_hardware_flops_per_sample"] = full["extra_train_flops_per_sample"] * 4 / 3
        full["extra_hfu_measured"] = full["extra_mfu_measured"] * 4 / 3
        return pd.concat([plain.assign(activation_checkpointing="none"),
                          full.assign(activation_checkpointing="full")], ignore_index=True)  # fmt: skip
    if compiled is not None:
        eager = make_token_runs(*args, seed)
        fast = make_token_runs(*args, seed + 10)
        speedup, comm = compiled
        fast["run_dir"] = fast["run_dir"].str.replace("/r", "-compiled/r", regex=False)
        fast["extra_compile_s"] = compile_s + fast["repeat"].astype(float)
        fast["extra_compiled_graphs"] = 12
        for col in ("samples_per_s", "tokens_per_s", "extra_achieved_flops_per_s", "extra_mfu_measured",
                    "extra_hfu_measured"):
            fast[col] *= speedup
        for col in ("epoch_time_s", "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "timed_wall_s"):
            fast[col] /= speedup
        multi = fast["world_size"] > 1
        for col in ("frac_comm", "frac_exposed_comm"):
            fast.loc[multi, col] *= comm
        return pd.concat([eager.assign(compile="none"), fast.assign(compile="model")], ignore_index=True)
    frames = []
    for i, (seq, batch) in enumerate(TOKEN_CELLS):
        r = make_runs(strategies=TOKEN_STRATEGIES, world_sizes=(1, 2), repeats=repeats, batch_sizes=(batch,),
                      dataset_sizes=(1024,), noise=noise, failures=False, others_at_1=False, seed=seed + i)  # fmt: skip
        r["model"], r["dataset"], r["seq_len"], r["vocab_size"] = "gpt_tiny", "synthetic_tokens", seq, vocab_size
        r["optimizer"], r["lr"] = "adamw", 0.003
        r["run_dir"] = r["run_dir"].str.replace("/r", f"-s{seq}/r", regex=False)
        # make_runs' epoch of 1024 samples; a sample here is `seq` tokens (and batch 16 is 1.1x slower there)
        f = r["strategy"].map(lambda s: slowdown.get(s, 1.0)) * ((seq / 128) / longer / 1.1 if seq != 128 else 1.0)
        r["samples_per_s"] /= f
        for col in ("epoch_time_s", "step_time_median_s", "step_time_mean_s", "step_time_p95_s", "timed_wall_s"):
            r[col] *= f
        if seq != 128:
            for col in ("frac_comm", "frac_exposed_comm"):
                r[col] *= comm_longer
        r["tokens_per_s"] = r["samples_per_s"] * seq
        flops = GPT_TINY_FLOPS_PER_TOKEN * seq
        r["extra_train_flops_per_sample"], r["extra_peak_flops_measured"] = flops, peak
        r["extra_achieved_flops_per_s"] = r["samples_per_s"] * flops
        r["extra_mfu_measured"] = r["extra_achieved_flops_per_s"] / (peak * r["world_size"])
        r["extra_mfu_datasheet"] = r["extra_peak_flops_datasheet"] = None
        # without checkpointing the hardware does the model's FLOPs: HFU = MFU (core.peaks.mfu_fields)
        r["extra_hardware_flops_per_sample"], r["extra_hfu_measured"] = flops, r["extra_mfu_measured"]
        r["extra_hfu_datasheet"] = None
        r["extra_compile_s"] = r["extra_compiled_graphs"] = None  # eager: null, as cell.compile_record writes it
        r["train_loss_final"], r["test_loss"], r["test_acc"] = final_loss, final_loss + 0.1, 0.6
        frames.append(r)
    return pd.concat(frames, ignore_index=True)


class Answers:
    """A sequential design's answers for hand-made tables (analysis.DesignAnswers' `compare`, which
    the analysis calls for the pairs of cells a finding or study compares): `rule(a, b)` gives the
    design's Comparison of two cells by their axis values, None where it did not ask."""

    def __init__(self, rule):
        self.rule = rule

    def compare(self, a, b, xa, xb):
        return self.rule(a, b) or analysis.Comparison.measured(xa, xb, source=analysis.Source.DESCRIPTIVE)

