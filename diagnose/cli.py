"""The `diagnose` command: parse options, call the library, pick a renderer, set the exit code.

Exit codes: 0 a report was produced (whatever it says), 2 bad usage or no logs found, 1 internal error.
`diagnose PATH...` analyses; `diagnose explain ID` and `diagnose patterns list|check` are subcommands.
"""

from __future__ import annotations

import os
import sys
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from diagnose.api import NoLogsError, analyze, load_library
from diagnose.checker import check_patterns
from diagnose.patterns import PatternError, load_patterns, pattern_dirs
from diagnose.readers import encodable

EXIT_USAGE = 2
EXIT_INTERNAL = 1
SUBCOMMANDS = ("explain", "patterns")


class Format(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    json = "json"


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    typer.echo(f"diagnose: {message}", err=True)
    return typer.Exit(code)


def _write(text: str, output: Path | None) -> None:
    text = encodable(text)  # the paths given on the command line are not in the frame
    if output is None:
        sys.stdout.write(text)
        return
    # Atomic: a hook reading report.json never sees half a file.
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=output.parent, delete=False, encoding="utf-8", suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, output)


def analyze_command(
    paths: Annotated[list[str], typer.Argument(help="Log directories or files; '-' reads one pasted log from stdin.")],
    job: Annotated[
        str | None, typer.Option("--job", "-j", help="SLURM job id: pick its files, add sacct facts.")
    ] = None,
    output_format: Annotated[
        Format, typer.Option("--format", "-f", help="terminal, markdown or json.")
    ] = Format.terminal,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report to FILE (atomically).")
    ] = None,
    patterns: Annotated[
        list[Path] | None, typer.Option("--patterns", "-p", help="Extra pattern directory (repeatable).")
    ] = None,
) -> None:
    """Tell why a distributed training job died, from every rank's logs."""
    try:
        library = load_library(patterns or [])
    except PatternError as exc:
        raise _fail(str(exc)) from exc
    stdin = sys.stdin.buffer.read() if paths == ["-"] else None
    try:
        diagnosis = analyze(paths, job=job, stdin=stdin, library=library)
    except NoLogsError as exc:
        raise _fail(str(exc)) from exc
    for warning in diagnosis.inputs.warnings:
        typer.echo(f"diagnose: warning: {warning}", err=True)
    if output_format is Format.json:
        from diagnose.render.json_report import render_json

        _write(render_json(diagnosis), output)
    elif output_format is Format.markdown:
        from diagnose.render.markdown import render_markdown

        _write(render_markdown(diagnosis), output)
    else:
        from diagnose.render.terminal import render_terminal

        if output is None:
            render_terminal(diagnosis)
        else:
            _write(render_terminal(diagnosis, width=100, color=False, capture=True) or "", output)


tools = typer.Typer(add_completion=False, no_args_is_help=True, help="Pattern library tools.")
patterns_app = typer.Typer(add_completion=False, no_args_is_help=True, help="List or check failure signatures.")
tools.add_typer(patterns_app, name="patterns")


@tools.command("explain")
def explain(pattern_id: Annotated[str, typer.Argument(help="Pattern id (or alias), e.g. cuda-oom.")]) -> None:
    """Explain one failure signature: what it means, why it matters, how to fix it."""
    library = load_patterns(pattern_dirs())
    found = next((p for p in library if pattern_id in (p.id, *p.aliases)), None)
    if found is None:
        raise _fail(f"no pattern {pattern_id!r}; see `diagnose patterns list`")
    lines = [
        f"{found.id}: {found.title}",
        f"category: {found.category}" + (f" / {found.subcategory}" if found.subcategory else ""),
        f"role: {found.role}   severity: {found.severity}",
        "",
        found.explanation,
        "",
        "Fixes:",
    ]
    lines += [f"  {i}. {fix}" for i, fix in enumerate(found.fixes, 1)]
    examples = [e for e in found.examples if e.should_match]
    if examples:
        lines += ["", "Example:", f"  {examples[0].text}"]
    if found.docs:
        lines += ["", "Docs: " + " ".join(found.docs)]
    typer.echo("\n".join(lines))


@patterns_app.command("list")
def list_patterns(
    patterns: Annotated[
        list[Path] | None, typer.Option("--patterns", "-p", help="Extra pattern directory (repeatable).")
    ] = None,
) -> None:
    """List every signature: id, category, role, title."""
    for p in load_patterns(pattern_dirs(patterns or [])):
        typer.echo(f"{p.id:<34} {p.category:<11} {p.role:<8} {p.title}")


@patterns_app.command("check")
def check(directory: Annotated[Path, typer.Argument(help="A directory of pattern TOML files.")]) -> None:
    """Validate a pattern directory and run its examples through the production matcher."""
    try:
        loaded = load_patterns([directory])
    except PatternError as exc:
        raise _fail(str(exc), 1) from exc
    failures = check_patterns(loaded)
    for f in failures:
        typer.echo(f"{f.path}: {f.pattern}: {f.problem}" + (f"\n    example: {f.example}" if f.example else ""))
    typer.echo(f"{len(loaded)} patterns, {sum(len(p.examples) for p in loaded)} examples, {len(failures)} failures")
    if failures:
        raise typer.Exit(1)


def main() -> None:
    """Entry point: subcommands by name, anything else is a path to analyse."""
    args = sys.argv[1:]
    try:
        if args and args[0] in SUBCOMMANDS:
            tools(args=args, prog_name="diagnose")
        else:
            app = typer.Typer(add_completion=False)
            app.command()(analyze_command)
            app(args=args, prog_name="diagnose")
    except SystemExit:
        raise
    except Exception as exc:  # an internal error must still be one clear line and exit 1
        typer.echo(f"diagnose: internal error: {type(exc).__name__}: {exc}", err=True)
        if os.environ.get("DIAGNOSE_DEBUG"):
            raise
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
