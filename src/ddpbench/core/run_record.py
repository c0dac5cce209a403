"""A run's record as its readers see it: the fields of summary.json's `extra` and `env` blocks, the
runs.csv columns they become, and the one reader of a run's summary.json (`read_summary`).

results.aggregate flattens a summary into a runs.csv row: extra.<name> becomes the column
extra_<name>, env.<name> env_<name>, and each recorded environment variable env.env_vars.<NAME>
env_var_<NAME>. `Extra` and `Env` name those columns: an attribute is the field's name in
summary.json, its value the runs.csv column (`Extra.mfu_measured == "extra_mfu_measured"`). A
module that reads a column names it through them, so a field is spelled here alone and a
renamed one is one edit (tests/unit/test_structure.py refuses an "extra_..."/"env_..." literal
elsewhere; tests/unit/test_run_record.py checks each value is its prefix and its attribute).
The rest of summary.json (its metrics, the timeline) is core.run_output's; the env block's
keys are written by core.sysinfo (PROVENANCE_KEYS), the extra block's by run.cell and what
it gathers (the strategy's own fields, flops, autobatch, transforms) and cluster.netlab.
Every writer fills them through `extra(...)` and `env(...)`, whose keywords must be fields named
here: the record is typed where it is written, not only where it is read (a field's name as a
literal key in a writer is refused by tests/unit/test_structure.py). A new field is one line
here and its keyword where it is measured.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Final, Iterable

#: summary.json's blocks whose fields become prefixed runs.csv columns.
EXTRA_BLOCK: Final = "extra"
ENV_BLOCK: Final = "env"
EXTRA_PREFIX: Final = "extra_"
ENV_PREFIX: Final = "env_"
#: env's block of recorded environment variables (core.sysinfo.ENV_PREFIXES): a column each.
ENV_VARS: Final = "env_vars"
ENV_VAR_PREFIX: Final = "env_var_"


def extra_column(name: str) -> str:
    """The runs.csv column of summary.json's extra.<name>."""
    return EXTRA_PREFIX + name


def env_column(name: str) -> str:
    """The runs.csv column of summary.json's env.<name>."""
    return ENV_PREFIX + name


def env_var_column(name: str) -> str:
    """The runs.csv column of a recorded environment variable (env.env_vars.<NAME>)."""
    return ENV_VAR_PREFIX + name


def is_env_column(column: str) -> bool:
    """Whether a runs.csv column comes from summary.json's env block (its variables included)."""
    return column.startswith(ENV_PREFIX)


def env_label(column: str) -> str:
    """An env column's field or variable name: env_torch -> torch, env_var_OMP_NUM_THREADS -> OMP_NUM_THREADS."""
    return column.removeprefix(ENV_VAR_PREFIX).removeprefix(ENV_PREFIX)


class Extra:
    """runs.csv columns of summary.json's extra fields: attribute = the field, value = its column.
    A namespace, never instantiated."""

    # How the run was measured (run.cell).
    steps_per_epoch: Final = "extra_steps_per_epoch"
    first_timed_step: Final = "extra_first_timed_step"
    steps_run: Final = "extra_steps_run"
    measurement_short: Final = "extra_measurement_short"  # stopped before the timing minimums
    comm_volume: Final = "extra_comm_volume"  # the strategy's volume law (ddpbench.strategies.COMM_VOLUME)
    oversubscribed: Final = "extra_oversubscribed"
    forked_from_threads: Final = "extra_forked_from_threads"
    # The model and its training (run.cell).
    model_parameters: Final = "extra_model_parameters"
    param_sample: Final = "extra_param_sample"
    training_health: Final = "extra_training_health"
    training_health_reason: Final = "extra_training_health_reason"
    param_rank_max_abs_diff: Final = "extra_param_rank_max_abs_diff"
    optimizer_impl: Final = "extra_optimizer_impl"
    # Bytes held per rank, the largest rank's (run.cell).
    optimizer_state_bytes: Final = "extra_optimizer_state_bytes"
    optimizer_state_bytes_total: Final = "extra_optimizer_state_bytes_total"
    param_bytes: Final = "extra_param_bytes"
    grad_bytes: Final = "extra_grad_bytes"
    held_bytes: Final = "extra_held_bytes"
    held_bytes_per_rank: Final = "extra_held_bytes_per_rank"
    # Compiling, checkpointing and mixed precision (run.transforms, run.cell).
    converted: Final = "extra_converted"  # the whole-model converters applied (run.transforms.MODEL_CONVERTERS), space-separated
    blocks: Final = "extra_blocks"
    checkpointed_blocks: Final = "extra_checkpointed_blocks"
    compiled_blocks: Final = "extra_compiled_blocks"
    compiled_loss: Final = "extra_compiled_loss"  # the loss compiled with the blocks (run.transforms.loss)
    compile_backend: Final = "extra_compile_backend"
    compile_s: Final = "extra_compile_s"
    compiled_graphs: Final = "extra_compiled_graphs"
    loss_scale_final: Final = "extra_loss_scale_final"
    skipped_steps: Final = "extra_skipped_steps"
    # MFU and the peak it used (run.flops, core.peaks.MFU_FIELDS and PEAK_FIELDS).
    train_flops_per_sample: Final = "extra_train_flops_per_sample"
    hardware_flops_per_sample: Final = "extra_hardware_flops_per_sample"  # with checkpointing's recompute
    achieved_flops_per_s: Final = "extra_achieved_flops_per_s"
    peak_flops_measured: Final = "extra_peak_flops_measured"
    peak_flops_datasheet: Final = "extra_peak_flops_datasheet"
    mfu_measured: Final = "extra_mfu_measured"
    mfu_datasheet: Final = "extra_mfu_datasheet"
    hfu_measured: Final = "extra_hfu_measured"
    hfu_datasheet: Final = "extra_hfu_datasheet"
    peak_flops_datasheet_source: Final = "extra_peak_flops_datasheet_source"
    peak_flops_measured_utc: Final = "extra_peak_flops_measured_utc"
    peak_flops_matrix_n: Final = "extra_peak_flops_matrix_n"
    peak_flops_other_cpu_frac: Final = "extra_peak_flops_other_cpu_frac"
    peak_flops_busy: Final = "extra_peak_flops_busy"
    # The timed steps' energy from the hardware's counters, where one exists (core.energy).
    energy_j: Final = "extra_energy_j"
    energy_cpu_j: Final = "extra_energy_cpu_j"
    energy_gpu_j: Final = "extra_energy_gpu_j"
    power_w: Final = "extra_power_w"
    energy_window_s: Final = "extra_energy_window_s"
    energy_source: Final = "extra_energy_source"
    energy_short_window: Final = "extra_energy_short_window"
    energy_per_sample_j: Final = "extra_energy_per_sample_j"
    energy_per_token_j: Final = "extra_energy_per_token_j"
    # batch_size "auto" (run.autobatch).
    auto_batch: Final = "extra_auto_batch"
    auto_batch_tried: Final = "extra_auto_batch_tried"
    auto_batch_method: Final = "extra_auto_batch_method"
    auto_batch_budget_gb: Final = "extra_auto_batch_budget_gb"
    auto_batch_need_mb: Final = "extra_auto_batch_need_mb"
    # An approximate strategy's replay of single (run.cell).
    param_deviation_from_single: Final = "extra_param_deviation_from_single"
    param_deviation_from_single_l2: Final = "extra_param_deviation_from_single_l2"
    single_train_loss_final: Final = "extra_single_train_loss_final"
    single_test_acc: Final = "extra_single_test_acc"
    accuracy_reached: Final = "extra_accuracy_reached"
    # A strategy's own fields (its `extra`): local_sgd's rounds,
    round_time_s: Final = "extra_round_time_s"
    steps_per_round: Final = "extra_steps_per_round"
    rounds: Final = "extra_rounds"
    round_comm_s: Final = "extra_round_comm_s"
    # fsdp's units and what its communication counter saw,
    fsdp_units: Final = "extra_fsdp_units"
    fsdp_comm_counted: Final = "extra_fsdp_comm_counted"
    exposed_comm_measured: Final = "extra_exposed_comm_measured"
    reshard_after_forward: Final = "extra_reshard_after_forward"
    # the pipeline's stages and bubble,
    stages: Final = "extra_stages"
    micro_batches: Final = "extra_micro_batches"
    bubble_fraction: Final = "extra_bubble_fraction"
    bubble_fraction_max: Final = "extra_bubble_fraction_max"
    bubble_fraction_ideal: Final = "extra_bubble_fraction_ideal"
    # ddp's buckets and the ones of its variants (ddp_fp16, powersgd, zero): as `numbers_text`.
    bucket_ready: Final = "extra_bucket_ready"  # each bucket's hand-over as a fraction of backward
    bucket_bytes: Final = "extra_bucket_bytes"  # each bucket's gradient bytes, in hand-over order
    # powersgd's compression.
    powersgd_start_iter_effective: Final = "extra_powersgd_start_iter_effective"
    powersgd_compression_rate: Final = "extra_powersgd_compression_rate"
    # A netlab cell's link (cluster.netlab).
    link_achieved_bps: Final = "extra_link_achieved_bps"  # bits/s the probe measured at the cell's start
    link_probe_bytes: Final = "extra_link_probe_bytes"  # what the probe sent
    link_probe_s: Final = "extra_link_probe_s"  # and in how long
    link_rate_bps: Final = "extra_link_rate_bps"  # bits/s the link was shaped to (none when unshaped)

    def __init__(self) -> None:
        raise TypeError("Extra is a namespace of column names")


class Env:
    """runs.csv columns of summary.json's env fields (its provenance): attribute = the field, value =
    its column. A namespace, never instantiated."""

    # When and by what (core.sysinfo.PROVENANCE_KEYS).
    started_utc: Final = "env_started_utc"
    ended_utc: Final = "env_ended_utc"
    command: Final = "env_command"
    job_id: Final = "env_job_id"  # the workflow invocation (core.sysinfo.JOB_ID_ENV)
    # The machine.
    host: Final = "env_host"
    cpu_model: Final = "env_cpu_model"
    cores: Final = "env_cores"
    ram_gb: Final = "env_ram_gb"
    os: Final = "env_os"
    kernel: Final = "env_kernel"
    glibc: Final = "env_glibc"
    gpu_name: Final = "env_gpu_name"
    backend: Final = "env_backend"
    threads_per_rank: Final = "env_threads_per_rank"
    # The software.
    python: Final = "env_python"
    torch: Final = "env_torch"
    torchvision: Final = "env_torchvision"
    numpy: Final = "env_numpy"
    scipy: Final = "env_scipy"
    pandas: Final = "env_pandas"
    matplotlib: Final = "env_matplotlib"
    psutil: Final = "env_psutil"
    snakemake: Final = "env_snakemake"
    cuda: Final = "env_cuda"
    cudnn: Final = "env_cudnn"
    nccl: Final = "env_nccl"
    # The code.
    git_commit: Final = "env_git_commit"
    git_diff_hash: Final = "env_git_diff_hash"
    code_fingerprint: Final = "env_code_fingerprint"
    lock_hash: Final = "env_lock_hash"
    off_lock: Final = "env_off_lock"
    container_image: Final = "env_container_image"
    user_model_digest: Final = "env_user_model_digest"  # the user's own model's source (run.cell)
    # The machine's load while it ran (run.cell).
    loadavg_start: Final = "env_loadavg_start"
    loadavg_end: Final = "env_loadavg_end"
    other_cpu_s: Final = "env_other_cpu_s"
    other_cpu_frac: Final = "env_other_cpu_frac"
    # How the MFU's figures were measured (run.flops): the peak's and the FLOP count's records.
    peak_flops: Final = "env_peak_flops"
    flop_count: Final = "env_flop_count"

    def __init__(self) -> None:
        raise TypeError("Env is a namespace of column names")


def columns(namespace: type) -> dict[str, str]:
    """field -> runs.csv column of every field `Extra` or `Env` names, in their order."""
    return {k: v for k, v in vars(namespace).items() if isinstance(v, str) and not k.startswith("_")}


def _record(namespace: type, fields: dict[str, Any], also: tuple = ()) -> dict[str, Any]:
    unknown = sorted(set(fields) - set(columns(namespace)) - set(also))
    if unknown:
        raise TypeError(f"not a field of summary.json's {namespace.__name__.lower()} (core.run_record."
                        f"{namespace.__name__}): {', '.join(unknown)}")  # fmt: skip
    return fields


def extra(**fields: Any) -> dict[str, Any]:
    """Fields of summary.json's `extra` block as a writer fills them: each keyword must be a field
    `Extra` names (a TypeError naming the others), so a writer cannot drift from the record its
    readers read (tests/unit/test_structure.py refuses a field's name as a literal key in a writer)."""
    return _record(Extra, fields)


def env(**fields: Any) -> dict[str, Any]:
    """Fields of summary.json's `env` block as a writer fills them (its variables too: ENV_VARS),
    each checked as `extra`'s are."""
    return _record(Env, fields, (ENV_VARS,))


def field(column: str) -> str:
    """The summary.json field of a runs.csv column: field(Extra.compile_s) == "compile_s" (a reader
    of a summary's extra or env block names the field through its column)."""
    return column.removeprefix(EXTRA_PREFIX).removeprefix(ENV_PREFIX)


def numbers_text(values: Iterable[float | int], digits: int = 6) -> str:
    """A list of numbers as one text field of summary.json's extra and a runs.csv cell (lists are not
    flattened into runs.csv): space-separated, integers as written, floats to `digits` significant
    digits (as extra.param_sample). `text_numbers` reads it back."""
    return " ".join(str(v) if isinstance(v, int) else f"{float(v):.{digits}g}" for v in values)


def text_numbers(value: Any) -> list[float]:
    """The numbers of a `numbers_text` field as read from summary.json or runs.csv (where one number
    may arrive as a float, and nothing as None, NaN or ""): [] for nothing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [float(v) for v in str(value).split()]


def read_summary(path: str | Path) -> dict[str, Any]:
    """A run's summary.json (or the ranks' summary.ranks.json) as a dict. Raises OSError when it
    cannot be read and ValueError when it is not a JSON object (json.JSONDecodeError included)."""
    summary = json.loads(Path(path).read_text())
    if not isinstance(summary, dict):
        raise ValueError("not a JSON object")
    return summary


__all__ = [
    "EXTRA_BLOCK", "ENV_BLOCK", "EXTRA_PREFIX", "ENV_PREFIX", "ENV_VARS", "ENV_VAR_PREFIX", "Extra", "Env",
    "extra_column", "env_column", "env_var_column", "is_env_column", "env_label", "columns", "extra", "env", "field", "numbers_text",
    "text_numbers", "read_summary",
]  # fmt: skip
