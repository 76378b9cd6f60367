"""JobSpec parsing: TOML + --set overrides, defaults, and errors that say what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec import JobSpec, SpecError, apply_overrides, from_json, load, loads, parse_value

MEGATRON = """
name = "gpt-8b"
nodes = 4
gpus_per_node = 8
partition = "batch"
account = "llm"
time = "04:00:00"
entry = "pretrain_gpt.py"
args = ["--num-layers", "32", "--num-attention-heads", "32", "--micro-batch-size", "1"]
tp = 4
pp = 2
gpu = "hopper"

[container]
kind = "pyxis"
image = "nvcr.io/nvidia/pytorch:25.09-py3"
mounts = ["/lustre:/lustre"]
"""


def test_toml_fields_become_the_spec():
    spec = loads(MEGATRON)
    assert (spec.nodes, spec.gpus_per_node, spec.tp, spec.pp) == (4, 8, 4, 2)
    assert spec.world_size == 32
    assert spec.heads == 32
    assert spec.container.kind == "pyxis" and spec.container.mounts == ("/lustre:/lustre",)


def test_set_overrides_win_over_the_file_and_reach_sub_tables():
    spec = loads(MEGATRON, ["nodes=8", "tp=8", 'container.image="img:2"', "moe-overlap=true"])
    assert (spec.nodes, spec.tp, spec.container.image, spec.moe_overlap) == (8, 8, "img:2", True)


def test_parse_value_reads_toml_or_falls_back_to_the_bare_string():
    assert parse_value("2") == 2
    assert parse_value("true") is True
    assert parse_value('["a", "b"]') == ["a", "b"]
    assert parse_value("00:30:00") != "x"  # a TOML local time or the string, never an error
    assert parse_value("batch") == "batch"


def test_override_without_equals_is_an_error():
    with pytest.raises(SpecError, match="KEY=VALUE"):
        apply_overrides({}, ["nodes"])


def test_unknown_key_names_the_known_ones():
    with pytest.raises(SpecError, match="unknown spec key.*gpus_per_nod.*known keys"):
        loads("gpus_per_nod = 8")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes = 0", "nodes = 0: must be a positive integer"),
        ('gpu = "volta"', "gpu = 'volta': choose one of"),
        ('fsdp = "zero3"', "fsdp = 'zero3': choose one of"),
        ("gpus_per_node = 0", "needs nproc_per_node"),
        ('[container]\nkind = "pyxis"', "needs container.image"),
        ("master_port = 70000", "use 1-65535"),
        ("nodes = [", "not valid TOML"),
    ],
)
def test_invalid_specs_say_what_to_change(text, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loads(text)


def test_master_port_auto_means_derived_from_the_job_id():
    assert loads('master_port = "auto"').master_port is None


def test_relative_worktree_is_relative_to_the_spec_file(tmp_path: Path):
    (tmp_path / "wt").mkdir()
    (tmp_path / "job.toml").write_text('worktree = "wt"\n')
    assert load(tmp_path / "job.toml").worktree == str((tmp_path / "wt").resolve())


def test_missing_spec_file_is_a_spec_error(tmp_path: Path):
    with pytest.raises(SpecError, match="cannot read spec"):
        load(tmp_path / "nope.toml")


def test_megatron_parallel_flags_are_appended_once():
    spec = loads(MEGATRON + "\n", ["cp=2", 'fsdp="megatron"', "moe_overlap=true"])
    args = spec.train_args()
    assert args[args.index("--tensor-model-parallel-size") + 1] == "4"
    assert args[args.index("--context-parallel-size") + 1] == "2"
    assert "--use-megatron-fsdp" in args and "--overlap-moe-expert-parallel-comm" in args
    assert "--expert-model-parallel-size" not in args  # ep = 1 is Megatron's default
    explicit = loads('args = ["--tensor-model-parallel-size", "2"]\ntp = 2').train_args()
    assert explicit.count("--tensor-model-parallel-size") == 1


def test_json_round_trip_is_what_the_job_checks_against():
    spec = loads(MEGATRON)
    assert from_json(spec.to_json()) == spec


def test_runner_auto_picks_uv_when_the_worktree_has_a_lock(tmp_path: Path):
    spec = JobSpec(worktree=str(tmp_path))
    assert spec.python_command() == [str(tmp_path / ".venv" / "bin" / "python")]
    (tmp_path / "uv.lock").write_text("")
    assert spec.python_command() == ["uv", "run", "python"]
