"""Category-specific details and concrete fixes for the chosen root cause.

A fix a user can act on beats a description: the pattern's own ordered fixes come first (with the
command in backticks lifted out so the report can show it separately), then arithmetic the log lets us
do for them (OOM headroom, TP x PP x CP against the world size, heads % TP).
"""

from __future__ import annotations

from typing import Any

import regex

from diagnose.candidates import Candidate, Incident
from diagnose.hang import HangAnalysis
from diagnose.model import Fix

_COMMAND = regex.compile(r"`([^`]+)`")
# Backticks in a fix also quote log text and identifiers (`NCCL WARN`, `__getitem__`); only a span that
# starts like a shell command (a known tool, or an environment assignment) is offered as one to run.
_SHELL_START = regex.compile(
    r"(?:ls|df|du|srun|sbatch|scontrol|sacct|squeue|scancel|sinfo|python3?|pip|uv|git|nvidia-smi|mkdir|ulimit|"
    r"unset|export|torchrun|dmesg|ip|ibstat|ibv_devinfo|show_gids|quota|lfs|cat|grep|free|numactl|py-spy|"
    r"deepspeed|accelerate|conda|module|ldd|nvcc|ray|kill|ps|htop|top)\s|[A-Z][A-Z0-9_]*=\S"
)
_SIZE = regex.compile(r"([\d.]+) ([KMGT]?)i?B")
_UNITS = {"": 1 / 2**30, "K": 1 / 2**20, "M": 1 / 2**10, "G": 1.0, "T": 2**10}


def fixes_from_pattern(texts: tuple[str, ...]) -> list[Fix]:
    fixes = []
    for text in texts:
        command = next((m.group(1) for m in _COMMAND.finditer(text) if _SHELL_START.match(m.group(1) + " ")), None)
        fixes.append(Fix(title=text, command=command))
    return fixes


def gib(value: str | None) -> float | None:
    """'19.68 GiB' -> 19.68; the allocator prints B/KiB/MiB/GiB."""
    if not value or (m := _SIZE.fullmatch(value.strip())) is None:
        return None
    return round(float(m.group(1)) * _UNITS[m.group(2)], 3)


def oom_details(fields: dict[str, str]) -> dict[str, Any]:
    details: dict[str, Any] = {k: gib(fields.get(k)) for k in ("requested", "total", "free")}
    details["gpu"] = int(fields["gpu"]) if fields.get("gpu", "").isdigit() else None
    if details["requested"] is not None and details["free"] is not None:
        details["short_by_gib"] = round(details["requested"] - details["free"], 3)
    return {k: v for k, v in details.items() if v is not None}


def parallelism_details(fields: dict[str, str], world_size: int | None = None) -> tuple[dict[str, Any], list[Fix]]:
    """The arithmetic Megatron did and what would satisfy it (TP must also divide the world size)."""
    numbers = {k: int(v) for k, v in fields.items() if v.isdigit()}
    details: dict[str, Any] = {}
    fixes: list[Fix] = []
    heads, tp = numbers.get("heads"), numbers.get("tp") or numbers.get("tp2")
    if heads and tp:
        valid = [
            t for t in range(1, heads + 1) if heads % t == 0 and t <= 64 and (not world_size or world_size % t == 0)
        ]
        details.update(num_attention_heads=heads, tensor_model_parallel_size=tp, valid_tp_sizes=valid)
        among = f" and the world size ({world_size})" if world_size else ""
        fixes.append(Fix(f"Use a TP size that divides {heads} heads{among}: one of {', '.join(map(str, valid))}."))
    world, tp3 = numbers.get("world"), numbers.get("tp3")
    if world and tp3:
        pp, cp = numbers.get("pp", 1), numbers.get("cp", 1)
        model = tp3 * pp * cp
        details.update(world_size=world, tp=tp3, pp=pp, cp=cp, model_parallel_size=model)
        fixes.append(
            Fix(
                f"WORLD_SIZE ({world}) must be a multiple of TP x PP x CP = {model}: change the node/GPU count "
                f"or the parallel sizes (data parallel = WORLD_SIZE / {model}).",
            )
        )
    return details, fixes


def advise(
    incident: Incident | None,
    hang: HangAnalysis | None,
    related: list[Incident] | None = None,
    world_size: int | None = None,
) -> tuple[dict[str, Any], list[Fix]]:
    if incident is None:
        if hang is not None:
            return _hang_details(hang), _hang_fixes(hang)
        return {}, []
    first = incident.first
    # A more specific line printed with the exception (NCCL's "Last error: ...") has the sharper fixes.
    ranked = sorted([incident, *(related or [])], key=lambda i: -(i.first.pattern.priority if i.first.pattern else 0))
    fixes = []
    for item in ranked:
        if item.first.pattern is not None:
            fixes += [f for f in fixes_from_pattern(item.first.pattern.fixes) if f not in fixes]
    details: dict[str, Any] = {}
    if related:
        lines = {i.first.text.strip(): i.first.pattern.id for i in related if i.first.pattern}
        details["related"] = [{"pattern": pattern, "text": text} for text, pattern in lines.items()]
    fields = {k: v for c in incident.candidates for k, v in c.fields.items()}
    if first.category == "oom":
        details["oom"] = oom_details(fields)
    elif first.subcategory == "divisibility":
        details["parallelism"], extra = parallelism_details(fields, world_size)
        fixes = extra + fixes
    elif first.category == "import" and fields.get("module"):
        details["import"] = {"module": fields["module"]}
    if not fixes and first.code_file:
        fixes.append(Fix(f"Fix the error raised at {first.code_file}:{first.code_line}."))
    return details, fixes


def _hang_details(hang: HangAnalysis) -> dict[str, Any]:
    return {"hang": {"suspects": list(hang.suspects), "reason": hang.reason, "table": list(hang.table)}}


def early_exit_fixes() -> list[Fix]:
    """A rank that finished or returned while the others still ran collectives."""
    return [
        Fix(
            "Make every rank run the same number of steps and collectives: shard the data evenly "
            "(DistributedSampler with drop_last=True, or pad the last shard), and keep rank-dependent "
            "early exits or skipped evaluations out of code that others reach with a collective."
        ),
        Fix(
            "For uneven inputs on purpose, wrap the loop in torch.distributed.algorithms.Join "
            "(DDP supports it) so finished ranks shadow the collectives of the others."
        ),
    ]


def _hang_fixes(hang: HangAnalysis) -> list[Fix]:
    fixes = early_exit_fixes() if hang.subcategory == "early_exit" else []
    if hang.suspects:
        ranks = ", ".join(map(str, hang.suspects))
        fixes.append(Fix(f"Inspect rank(s) {ranks} first: {hang.reason}."))
    if hang.subcategory == "desync":
        fixes.append(
            Fix(
                "Ranks timed out in different collectives: look for rank-dependent control flow (if rank == …) "
                "around the last collective, or differing data lengths per rank."
            )
        )
    fixes.append(
        Fix(
            "Re-run with the flight recorder to see each rank's last collectives.",
            command="TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1",
        )
    )
    fixes.append(
        Fix("Use py-spy dump --pid <pid> on a stuck rank to see where it waits.", command="py-spy dump --pid <pid>")
    )
    return fixes


RUN_CONFIG_KEYS = (
    "world_size",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "data_parallel_size",
    "sequence_parallel",
    "micro_batch_size",
    "global_batch_size",
    "seq_length",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "recompute_granularity",
    "use_distributed_optimizer",
    "fp16",
    "bf16",
)


_WORLD_SIZE_FIELDS = ("world_size", "world_size2", "world_size3", "world_size4", "world_size5", "world_size6", "world")


def announced_world_size(candidates: list[Candidate], config: dict[str, str]) -> int:
    """The largest world size any process stated (0 if none): global ranks run 0..N-1, so ranks above every
    one that wrote a line, or a rank that left without a word, still count as expected."""
    sizes = [int(config["world_size"])] if config.get("world_size", "").isdigit() else []
    for c in candidates:
        if c.role == "context" and not _SOURCE_CALL.match(c.text):
            sizes += [int(v) for key in _WORLD_SIZE_FIELDS if (v := c.fields.get(key)) and v.isdigit()]
    return max(sizes, default=0)


# a traceback's source line calling with the size as an argument (`    dist.init_process_group(..., world_size=1,
# rank=1)`) is the code, not a process stating the size it runs with
_SOURCE_CALL = regex.compile(r"\s+[\w.\[\]]+(?:\s*=\s*[\w.\[\]]+)?\(.*\bworld_size=")


def run_config(candidates: list[Candidate]) -> dict[str, str]:
    """The settings an OOM or divisibility error must be read against, from `name ..... value` lines."""
    found: dict[str, str] = {}
    for c in candidates:
        name, value = c.fields.get("name"), c.fields.get("value")
        if c.role == "context" and name in RUN_CONFIG_KEYS and value is not None:
            found.setdefault(name, value.strip())
    return {k: found[k] for k in RUN_CONFIG_KEYS if k in found}
