"""The committed config schema is the one generated from CellParams; configs validate."""

import pathlib

import jsonschema
import pytest
import yaml

from ddpbench.plan import config_schema
from ddpbench.core.params import CellParams

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]


def test_committed_schema_is_up_to_date():
    assert config_schema.main(["--check"]) == 0, "run: ddpbench config-schema --write"


def test_every_cell_parameter_is_an_axis_and_a_setting():
    props = config_schema.build_schema()["properties"]
    settings = {**props["timing"]["properties"], **props["params"]["properties"]}
    assert set(CellParams.names()) == set(settings) - set(config_schema.TIMING_SETTINGS)
    assert set(CellParams.names()) | set(config_schema.LAUNCH_AXES) == set(props["grid"]["properties"])
    for name, prop in settings.items():
        if name in config_schema.TIMING_SETTINGS:
            continue
        assert prop["default"] == getattr(CellParams(), name)
        assert prop["description"]


def test_every_key_has_type_description_and_axes_are_non_empty():
    def walk(schema, where):
        for name, prop in schema.get("properties", {}).items():
            assert "description" in prop, f"{where}.{name}"
            assert {"type", "anyOf", "$ref"} & set(prop), f"{where}.{name}"
            walk(prop, f"{where}.{name}")

    schema = config_schema.build_schema()
    walk(schema, "config")
    assert schema["additionalProperties"] is False
    for prop in schema["properties"]["grid"]["properties"].values():
        assert prop["type"] == "array" and prop["minItems"] == 1


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    jsonschema.Draft202012Validator(config_schema.build_schema()).validate(yaml.safe_load(path.read_text()))


def test_markdown_reference_lists_every_key():
    text = config_schema.render_markdown()
    for name in CellParams.names():
        assert f"`{name}`" in text


def test_timing_minimums_stability_threshold_and_oversubscription_keys():
    props = config_schema.build_schema()["properties"]
    timing = props["timing"]["properties"]
    assert timing["min_timed_steps"]["default"] == 20 and timing["min_timed_steps"]["type"] == "integer"
    assert timing["min_timed_s"]["default"] == 1.0 and timing["min_timed_s"]["type"] == "number"
    assert timing["max_rel_ci"] == {**timing["max_rel_ci"], "type": "number", "exclusiveMinimum": 0, "default": 0.05}
    assert "max_rel_ci" not in CellParams.names()  # the report's setting, never a cell flag
    assert props["allow_oversubscribe"]["type"] == "boolean" and props["allow_oversubscribe"]["default"] is False
    validator = jsonschema.Draft202012Validator(config_schema.build_schema())
    assert not validator.is_valid({"timing": {"max_rel_ci": 0}})
    assert not validator.is_valid({"allow_oversubscribe": "yes"})


def test_tiny_grid_runs_few_steps():
    """configs/tiny.yaml (the test grid) validates and keeps its runs a few steps long:
    max_steps only caps, so its timing minimums must be small."""
    tiny = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    jsonschema.Draft202012Validator(config_schema.build_schema()).validate(tiny)
    timing = tiny["timing"]
    assert timing["min_timed_s"] == 0
    assert 1 + timing["warmup_steps"] + timing["min_timed_steps"] <= timing["max_steps"] <= 8


def test_command_line_strings_become_numbers_only_where_the_schema_wants_one():
    from ddpbench.plan.config_schema import build_schema, coerce_typed_strings, non_finite_key

    given = {
        "params": {"bucket_mb": "10.0", "data_root": "1"},
        "grid": {"world_size": ["1", "2"], "strategy": ["ddp"], "batch_size": ["auto", "64"]},
        "exclude": [{"world_size": {"min": "2"}}, {"strategy": "ddp", "seed": ["3"]}],
        "allow_oversubscribe": "true",
        "timing": {"timeout_s": ".nan"},
    }
    got = coerce_typed_strings(given, build_schema())
    assert got["params"] == {"bucket_mb": 10.0, "data_root": "1"}  # a path stays a string
    assert got["grid"] == {"world_size": [1, 2], "strategy": ["ddp"], "batch_size": ["auto", 64]}
    assert got["exclude"] == [{"world_size": {"min": 2}}, {"strategy": "ddp", "seed": [3]}]
    assert got["allow_oversubscribe"] is True
    assert non_finite_key(got) == "timing.timeout_s"
    assert non_finite_key({"a": [1.0, {"b": float("inf")}]}) == "a[1].b"
    assert non_finite_key({"a": [1.0, "nan"]}) is None
