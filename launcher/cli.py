"""`python -m launcher`: typer commands, each a thin call into one module; no logic lives here."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from launcher import checks, hook, run, sbatch, spec, watch

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
err = Console(stderr=True, soft_wrap=True)
out = Console()

SpecArg = Annotated[Path, typer.Argument(help="JobSpec TOML file ('-' for defaults + --set only)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="override a spec key: KEY=VALUE (repeatable)")]
NodesOpt = Annotated[int | None, typer.Option(help="override `nodes`")]
GpusOpt = Annotated[int | None, typer.Option("--gpus-per-node", help="override `gpus_per_node`")]
PartitionOpt = Annotated[str | None, typer.Option(help="override `partition`")]
AccountOpt = Annotated[str | None, typer.Option(help="override `account`")]
TimeOpt = Annotated[str | None, typer.Option("--time", help="override `time`")]
WorktreeOpt = Annotated[str | None, typer.Option(help="override `worktree`")]


def _load(
    path: Path,
    sets: list[str] | None,
    nodes: int | None = None,
    gpus: int | None = None,
    partition: str | None = None,
    account: str | None = None,
    time_limit: str | None = None,
    worktree: str | None = None,
) -> spec.JobSpec:
    overrides = list(sets or [])
    for key, value in (("nodes", nodes), ("gpus_per_node", gpus), ("worktree", worktree)):
        if value is not None:
            overrides.append(f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}")
    for key, text in (("partition", partition), ("account", account), ("time", time_limit)):
        if text is not None:
            overrides.append(f"{key}={text!r}")
    try:
        return spec.load(path, overrides)
    except spec.SpecError as exc:
        err.print("[red]spec error:[/red] ", end="")
        err.print(str(exc), markup=False, highlight=False)
        raise typer.Exit(2) from exc


def _report(findings: list[checks.Finding]) -> int:
    for f in findings:
        colour = "red" if f.level == "error" else "yellow"
        err.print(f"[{colour}]{f.level}[/{colour}] ", end="", highlight=False)
        err.print(f"[{f.check}] {f.message}", highlight=False, markup=False)
    errors = sum(f.level == "error" for f in findings)
    if not findings:
        err.print("[green]preflight ok[/green]")
    return 1 if errors else 0


@app.command("sbatch")
def sbatch_cmd(
    path: SpecArg,
    sets: SetOpt = None,
    nodes: NodesOpt = None,
    gpus_per_node: GpusOpt = None,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    time_limit: TimeOpt = None,
    worktree: WorktreeOpt = None,
) -> None:
    """Print the sbatch script a spec renders to."""
    job = _load(path, sets, nodes, gpus_per_node, partition, account, time_limit, worktree)
    sys.stdout.write(sbatch.render(job))


@app.command()
def submit(
    path: SpecArg,
    sets: SetOpt = None,
    nodes: NodesOpt = None,
    gpus_per_node: GpusOpt = None,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    time_limit: TimeOpt = None,
    worktree: WorktreeOpt = None,
    skip_check: Annotated[bool, typer.Option("--skip-check", help="submit even when preflight finds errors")] = False,
) -> None:
    """Preflight, then `sbatch --parsable` the rendered script; prints the job id."""
    job = _load(path, sets, nodes, gpus_per_node, partition, account, time_limit, worktree)
    if _report(checks.run_all(job)) and not skip_check:
        err.print("not submitted: fix the errors above (or pass --skip-check)")
        raise typer.Exit(1)
    try:
        job_id = sbatch.submit(sbatch.render(job), job)
    except RuntimeError as exc:
        err.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from exc
    print(job_id)
    err.print(f"logs: {job.worktree_path / job.log_root / job_id}/  watch: python -m launcher watch {job_id}")


@app.command()
def check(
    path: Annotated[Path | None, typer.Argument(help="JobSpec TOML file")] = None,
    sets: SetOpt = None,
    in_job: Annotated[bool, typer.Option("--in-job", help="inside the job: spec from LAUNCHER_SPEC_JSON")] = False,
) -> None:
    """Preflight: parallelism arithmetic, GPUs, worktree/.venv on a shared filesystem, entry point, port."""
    if in_job:
        job = spec.from_json(os.environ["LAUNCHER_SPEC_JSON"])
    elif path is None:
        err.print("give a spec file, or --in-job inside a job")
        raise typer.Exit(2)
    else:
        job = _load(path, sets)
    raise typer.Exit(_report(checks.run_all(job, in_job=in_job)))


@app.command("run-node", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_node(
    ctx: typer.Context,
    node_rank: Annotated[int, typer.Option(help="this node's rank (SLURM_NODEID)")],
    node_dir: Annotated[Path, typer.Option(help="torchrun --log-dir of this node: logs/<job>/<rank>-<host>")],
) -> None:
    """Inside srun: run the torchrun command after `--`, writing node.json and the job's manifest.json."""
    command = [a for a in ctx.args if a != "--"] if ctx.args[:1] == ["--"] else list(ctx.args)
    if not command:
        err.print("run-node needs the torchrun command after --")
        raise typer.Exit(2)
    raise typer.Exit(run.run_node(node_rank, node_dir, command))


@app.command()
def manifest(job_dir: Annotated[Path, typer.Argument(help="logs/<job> folder")]) -> None:
    """Merge every node's node.json into logs/<job>/manifest.json (also done by each node and the hook)."""
    print(run.merge_manifest(job_dir))


@app.command("watch")
def watch_cmd(
    job_id: Annotated[str, typer.Argument(help="SLURM job id")],
    artifact: Annotated[Path | None, typer.Option(help="scancel as soon as this file exists")] = None,
    cancel_on_failure: Annotated[
        bool, typer.Option("--cancel-on-failure", help="scancel once a certain root cause is in the logs")
    ] = False,
    logs: Annotated[Path | None, typer.Option(help="logs/<job> folder (default: found via scontrol)")] = None,
    interval: Annotated[float, typer.Option(help="seconds between polls")] = 2.0,
    collective_timeout: Annotated[float, typer.Option(help="the job's NCCL/gloo timeout, seconds")] = 600.0,
    gpus: Annotated[int | None, typer.Option(help="GPUs held (default: ranks in the manifest)")] = None,
) -> None:
    """Live job state (squeue/sacct); optionally cancel on artifact or on a certain failure."""
    last: list[str] = []

    def show(status: watch.JobStatus, note: str) -> None:
        line = f"{status.job_id} {status.state:<10} {status.elapsed:>9} {status.nodes or status.reason} {note}"
        if [line] != last:
            last[:] = [line]
            out.print(line, highlight=False, markup=False)

    result = watch.watch(
        job_id,
        artifact=artifact,
        cancel_on_failure=cancel_on_failure,
        logs=logs,
        interval_s=interval,
        collective_timeout_s=collective_timeout,
        gpus=gpus,
        on_status=show,
    )
    out.print(result.message, highlight=False, markup=False)
    failed = result.action == "cancelled-on-failure" or result.status.state not in ("COMPLETED", "CANCELLED")
    raise typer.Exit(0 if result.action == "artifact" or not failed else 1)


@app.command("hook", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def hook_cmd(
    ctx: typer.Context,
    worker: Annotated[bool, typer.Option("--worker", hidden=True)] = False,
) -> None:
    """Failure hook (EpilogSlurmctld, Epilog, strigger --fini): report.md/.json beside the logs; exits 0."""
    if worker:
        raise typer.Exit(hook.work(list(ctx.args)))
    raise typer.Exit(hook.run_bounded(list(ctx.args)))


@app.command("hook-script")
def hook_script(
    output: Annotated[Path | None, typer.Option("--out", help="write here (made executable) instead of stdout")] = None,
    log_file: Annotated[str, typer.Option("--log", help="where the hook appends its messages")] = (
        "/var/log/slurm/launcher-hook.log"
    ),
    timeout: Annotated[int, typer.Option(help="seconds before the analysis is killed")] = hook.DEFAULT_TIMEOUT_S,
) -> None:
    """Print (or write) the executable that slurm.conf's EpilogSlurmctld= / Epilog= points at."""
    text = hook.stub_script(sys.executable, log_file, timeout)
    if output is None:
        sys.stdout.write(text)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    output.chmod(0o755)
    print(output)


def main() -> None:
    app()
