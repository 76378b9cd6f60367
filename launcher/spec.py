"""One JobSpec: everything needed to render, check and run a distributed training job on SLURM.

A spec is a TOML file whose keys are the field names below; `--set key=value` flags override it, so
one file serves a whole sweep. Parsing is pure (text in, JobSpec out) so it is unit-tested without SLURM.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_GENERATIONS = ("ampere", "hopper", "blackwell", "none")
BLACKWELL = ("blackwell",)
FSDP_KINDS = ("none", "megatron", "torch")
CONTAINER_KINDS = ("none", "pyxis", "singularity")
RUNNERS = ("auto", "uv", "python")


class SpecError(ValueError):
    """A spec that cannot describe a job; the message names the key and what to write instead."""


@dataclass(frozen=True)
class Container:
    """How each srun task enters the image (pyxis/enroot flags, or a singularity exec prefix)."""

    kind: str = "none"
    image: str = ""
    mounts: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()  # extra site flags, passed verbatim


@dataclass(frozen=True)
class JobSpec:
    """A distributed training job: allocation, parallelism, entry point and runtime."""

    name: str = "train"
    nodes: int = 1
    gpus_per_node: int = 8
    nproc_per_node: int | None = None  # defaults to gpus_per_node; set it for CPU jobs (gpus_per_node = 0)
    cpus_per_task: int | None = None
    partition: str = ""
    account: str = ""
    time: str = "01:00:00"
    worktree: str = "."
    entry: str = "pretrain_gpt.py"
    args: tuple[str, ...] = ()
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    num_attention_heads: int | None = None  # read from args (--num-attention-heads) when not set
    fsdp: str = "none"
    moe_overlap: bool = False
    gpu: str = "hopper"
    parallel_args: bool = True  # append Megatron's --tensor-model-parallel-size ... flags to args
    runner: str = "auto"  # auto: uv when the worktree has uv.lock, else the worktree's .venv python
    venv: str = ".venv"
    master_port: int | None = 29500  # None: derived from the job id, so jobs sharing a node never collide
    log_root: str = "logs"
    single_host_nodes: bool = False  # every node an srun task of one machine (single-node test clusters)
    launcher_python: str = ""  # the interpreter that has `launcher` installed; default: this one
    env: dict[str, str] = field(default_factory=dict)
    sbatch_extra: tuple[str, ...] = ()
    container: Container = field(default_factory=Container)

    @property
    def procs_per_node(self) -> int:
        return self.nproc_per_node if self.nproc_per_node is not None else self.gpus_per_node

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def heads(self) -> int | None:
        if self.num_attention_heads is not None:
            return self.num_attention_heads
        return _arg_int(self.args, "--num-attention-heads")

    @property
    def worktree_path(self) -> Path:
        return Path(self.worktree).expanduser().resolve()

    @property
    def venv_path(self) -> Path:
        return self.worktree_path / self.venv

    def uses_uv(self) -> bool:
        if self.runner != "auto":
            return self.runner == "uv"
        return (self.worktree_path / "uv.lock").exists()

    def python_command(self) -> list[str]:
        """How the worktree's Python is started: `uv run python` or the venv's interpreter."""
        if self.uses_uv():
            return ["uv", "run", "python"]
        return [str(self.venv_path / "bin" / "python")]

    def train_args(self) -> list[str]:
        """The entry point's arguments, with the parallelism flags Megatron expects appended."""
        out = list(self.args)
        if self.parallel_args:
            for flag, value in (
                ("--tensor-model-parallel-size", self.tp),
                ("--pipeline-model-parallel-size", self.pp),
                ("--context-parallel-size", self.cp),
                ("--expert-model-parallel-size", self.ep),
            ):
                if flag not in out and value != 1:
                    out += [flag, str(value)]
            extra = {"megatron": "--use-megatron-fsdp", "torch": "--use-torch-fsdp2"}.get(self.fsdp)
            if extra and extra not in out:
                out.append(extra)
            if self.moe_overlap and "--overlap-moe-expert-parallel-comm" not in out:
                out.append("--overlap-moe-expert-parallel-comm")
        return out

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def _arg_int(args: tuple[str, ...], flag: str) -> int | None:
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == flag and i + 1 < len(args) else None
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return None


def _field_types() -> dict[str, Any]:
    return {f.name: f.type for f in dataclasses.fields(JobSpec)}


def parse_value(text: str) -> Any:
    """A `--set` value: TOML syntax when it parses (2, true, ["a"]), else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`key=value` strings over a parsed TOML table; `container.image=...` reaches the sub-table."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--set {item!r}: write KEY=VALUE, e.g. --set nodes=2")
        key = key.strip().replace("-", "_")
        if "." in key:
            table, sub = key.split(".", 1)
            out.setdefault(table, {})
            out[table][sub] = parse_value(value)
        else:
            out[key] = parse_value(value)
    return out


def from_dict(data: dict[str, Any], base_dir: Path | None = None) -> JobSpec:
    """Validate a table into a JobSpec; relative worktrees are relative to the spec file's folder."""
    known = _field_types()
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SpecError(f"unknown spec key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
    values = dict(data)
    container = values.pop("container", {}) or {}
    if not isinstance(container, dict):
        raise SpecError("container must be a table: [container] kind = 'pyxis', image = '...'")
    bad = sorted(set(container) - {f.name for f in dataclasses.fields(Container)})
    if bad:
        raise SpecError(f"unknown container key(s) {', '.join(bad)}; known: kind, image, mounts, flags")
    for key in ("mounts", "flags"):
        if key in container:
            container[key] = tuple(str(x) for x in container[key])
    for key in ("args", "sbatch_extra"):
        if key in values:
            raw = values[key]
            values[key] = tuple(raw.split()) if isinstance(raw, str) else tuple(str(x) for x in raw)
    if "env" in values:
        values["env"] = {str(k): str(v) for k, v in dict(values["env"]).items()}
    worktree = Path(str(values.get("worktree", "."))).expanduser()
    if not worktree.is_absolute():  # relative to the spec file; the default "." is where you submit from
        worktree = (base_dir if base_dir is not None and "worktree" in values else Path.cwd()) / worktree
    values["worktree"] = str(worktree.resolve())
    if values.get("master_port") in ("auto", "job", 0):
        values["master_port"] = None
    spec = JobSpec(**values, container=Container(**container))
    validate(spec)
    if not spec.launcher_python:
        spec = dataclasses.replace(spec, launcher_python=sys.executable)
    return spec


def validate(spec: JobSpec) -> None:
    """Shape errors a spec can have on its own, before any file or cluster is looked at."""
    for name in ("nodes", "tp", "pp", "cp", "ep"):
        value = getattr(spec, name)
        if not isinstance(value, int) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    if spec.gpus_per_node < 0:
        raise SpecError(f"gpus_per_node = {spec.gpus_per_node}: must be 0 (CPU) or more")
    if spec.procs_per_node < 1:
        raise SpecError("gpus_per_node = 0 needs nproc_per_node (processes per node for a CPU job)")
    for name, allowed in (
        ("gpu", GPU_GENERATIONS),
        ("fsdp", FSDP_KINDS),
        ("runner", RUNNERS),
        ("container.kind", CONTAINER_KINDS),
    ):
        value = spec.container.kind if name == "container.kind" else getattr(spec, name)
        if value not in allowed:
            raise SpecError(f"{name} = {value!r}: choose one of {', '.join(allowed)}")
    if spec.container.kind != "none" and not spec.container.image:
        raise SpecError(f"container.kind = {spec.container.kind!r} needs container.image")
    if spec.master_port is not None and not 1 <= spec.master_port <= 65535:
        raise SpecError(f"master_port = {spec.master_port}: use 1-65535, or 'auto' to derive it from the job id")


def loads(text: str, overrides: list[str] | None = None, base_dir: Path | None = None) -> JobSpec:
    """A JobSpec from TOML text plus `key=value` overrides."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"spec is not valid TOML: {exc}") from exc
    return from_dict(apply_overrides(data, overrides or []), base_dir)


def load(path: str | os.PathLike[str], overrides: list[str] | None = None) -> JobSpec:
    """Read a spec file; `-` reads nothing and starts from the defaults."""
    if str(path) == "-":
        return loads("", overrides, Path.cwd())
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec ({exc.strerror or exc})") from exc
    return loads(text, overrides, file.resolve().parent)


def from_json(text: str) -> JobSpec:
    """The spec as the rendered job script carries it (LAUNCHER_SPEC_JSON), for checks inside the job."""
    data = json.loads(text)
    container = data.pop("container", {})
    for key in ("args", "sbatch_extra"):
        data[key] = tuple(data.get(key, ()))
    container = {k: tuple(v) if isinstance(v, list) else v for k, v in container.items()}
    return JobSpec(**data, container=Container(**container))
