"""The run record (core.run_record): every column it names is its block's prefix and its field,
the env fields every summary carries are named, and read_summary reads a summary.json."""

from __future__ import annotations

import json

import pytest

from ddpbench.core import run_record, sysinfo
from ddpbench.core.run_record import Env, Extra

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("namespace, prefix", [(Extra, "extra_"), (Env, "env_")])
def test_each_column_is_its_prefix_and_its_field(namespace, prefix):
    columns = run_record.columns(namespace)
    assert columns, namespace
    assert {field: column for field, column in columns.items() if column != prefix + field} == {}
    with pytest.raises(TypeError):
        namespace()


def test_every_provenance_field_has_its_env_column():
    """What core.sysinfo records in every summary's env block (but its variables, a column each)."""
    named = set(run_record.columns(Env))
    assert {k for k in sysinfo.PROVENANCE_KEYS if k != run_record.ENV_VARS} - named == set()


def test_column_helpers_follow_aggregate():
    assert run_record.extra_column("mfu_measured") == Extra.mfu_measured
    assert run_record.env_column("started_utc") == Env.started_utc
    assert run_record.env_var_column("OMP_NUM_THREADS") == "env_var_OMP_NUM_THREADS"
    assert run_record.env_label("env_var_OMP_NUM_THREADS") == "OMP_NUM_THREADS"
    assert run_record.env_label(Env.torch) == "torch"
    assert run_record.is_env_column(Env.host) and not run_record.is_env_column(Extra.held_bytes)


def test_a_list_is_one_text_field_read_back_from_runs_csv(tmp_path):
    """extra.bucket_ready and .bucket_bytes: space-separated numbers (as extra.param_sample), a str in
    summary.json, so runs.csv keeps it; pandas reads one number as a float and nothing as NaN."""
    import pandas as pd

    from ddpbench.results import aggregate

    ready, sizes = run_record.numbers_text([0.31234567, 0.62, 0.97], 4), run_record.numbers_text([1024, 2048])
    assert (ready, sizes) == ("0.3123 0.62 0.97", "1024 2048")
    assert run_record.text_numbers(ready) == [0.3123, 0.62, 0.97]
    assert [run_record.text_numbers(v) for v in (None, float("nan"), "", 0.5)] == [[], [], [], [0.5]]
    for i, extra in enumerate([{"bucket_ready": ready, "bucket_bytes": sizes}, {"bucket_ready": "0.98"}, {}]):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "summary.json").write_text(json.dumps({"status": "failed", "extra": extra}))
    aggregate.write_runs([aggregate.run_row(tmp_path / f"r{i}" / "summary.json") for i in range(3)], tmp_path / "runs.csv")
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert [run_record.text_numbers(v) for v in runs[Extra.bucket_ready]] == [[0.3123, 0.62, 0.97], [0.98], []]
    assert run_record.text_numbers(runs[Extra.bucket_bytes][0]) == [1024, 2048]


def test_read_summary(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"status": "ok", "extra": {"steps_run": 3}}\n')
    assert run_record.read_summary(path) == {"status": "ok", "extra": {"steps_run": 3}}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        run_record.read_summary(path)
    path.write_text('{"status": "o')  # cut short (a full disk)
    with pytest.raises(ValueError):
        run_record.read_summary(path)
    with pytest.raises(OSError):
        run_record.read_summary(tmp_path / "missing" / "summary.json")
