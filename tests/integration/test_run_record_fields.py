"""core.run_record names every field a run writes: each key of a real run's summary.json `extra`
and `env` blocks is an attribute of Extra or Env, so a field added to the harness without its
column in the record fails here (issue 56: one module defines the record)."""

import json

import pytest

from ddpbench.core import run_record
from ddpbench.core.run_record import Env, Extra

pytestmark = pytest.mark.integration


def unrecorded(summary: dict) -> list[str]:
    extra = set(summary[run_record.EXTRA_BLOCK]) - set(run_record.columns(Extra))
    env = set(summary[run_record.ENV_BLOCK]) - {run_record.ENV_VARS} - set(run_record.columns(Env))
    return sorted(f"extra.{k}" for k in extra) + sorted(f"env.{k}" for k in env)


def test_every_field_of_a_real_run_is_in_the_record(cells_dir, single_dir):
    summaries = [*cells_dir[max(cells_dir)].glob("*/summary.json"), *single_dir.glob("*/summary.json")]
    assert len(summaries) > 3
    for path in summaries:
        summary = json.loads(path.read_text())
        assert summary["status"] == "ok" and summary[run_record.EXTRA_BLOCK], path
        assert unrecorded(summary) == [], path


def test_a_field_missing_from_the_record_is_named():
    assert unrecorded({"extra": {"mfu_measured": 0.1, "new_field": 1}, "env": {"host": "h", "env_vars": {}}}) == [
        "extra.new_field"
    ]
