"""Terminal view: the verdict first, then the proof, then what to do. The only module that imports rich.

Everything that came from a log goes into rich `Text` objects, never into markup strings, so a line
holding "[bold]" or ":warning:" prints as written; control characters are shown escaped so a log
cannot move the cursor or recolour the terminal. Facts (evidence grouping, detail arithmetic) come from
the shared helpers in render/markdown.py so the two views never disagree.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence

from rich.box import ROUNDED
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from diagnose.model import Diagnosis, Evidence, Fix, Symptom, Verdict
from diagnose.render.facts import (
    NONE,
    DetailSection,
    detail_sections,
    group_evidence,
    human_bytes,
    knows_ranks,
    place,
    plural,
    rank_rows,
    ranks_text,
)

LONG_LINE = 320  # about four lines at 80 columns: enough to read an error, short enough to keep the layout
MAX_WARNINGS = 10
_INVISIBLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A)}
_INVISIBLE |= {c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}  # bidi overrides
_CATEGORY_STYLE = {"ok": "bold green", "hang": "bold yellow", "unknown": "bold yellow"}
_CONFIDENCE_STYLE = {"high": "green", "medium": "yellow", "low": "red"}
_CODE_STYLE = "bold cyan"


def _visible(text: object) -> str:
    """Escape control characters (ESC, CR, bidi overrides) so the text cannot act on the terminal."""
    return str(text).replace("\r\n", "\n").translate(_INVISIBLE).expandtabs(4)


def _line(text: object, limit: int = LONG_LINE) -> str:
    """One log line for display: single line, cut with an ellipsis when absurdly long."""
    flat = " ⏎ ".join(part for part in _visible(text).strip().split("\n"))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text(text: object, style: str = "", limit: int = LONG_LINE) -> Text:
    """Folded at the column edge so long paths and errors wrap inside their cell instead of spilling."""
    return Text(_line(text, limit), style=style, overflow="fold")


def _lines(items: Sequence[object]) -> Text:
    """Several short items, one per line (file:line lists), each folded on its own."""
    return Text("\n".join(_line(item) for item in items), overflow="fold")


def _with_code(text: object) -> Text:
    """Pattern prose with `backticked` commands highlighted, backticks kept so copy-paste still works."""
    out = _text(text)
    out.highlight_regex(r"`[^`]+`", _CODE_STYLE)
    return out


def _grid(*widths: int | None) -> Table:
    grid = Table.grid(padding=(0, 2))
    for i, width in enumerate(widths):
        grid.add_column(no_wrap=i < len(widths) - 1, min_width=width, style="dim" if i == 0 else "")
    return grid


# --- verdict ---------------------------------------------------------------------------------------


def _category_style(verdict: Verdict) -> str:
    return _CATEGORY_STYLE.get(str(verdict.category), "bold red")


def _rank_fact(diagnosis: Diagnosis) -> tuple[str, Text] | None:
    verdict = diagnosis.verdict
    ranks = ranks_text(verdict.ranks) or (str(verdict.rank) if verdict.rank is not None else "")
    if not ranks:
        return None
    label = "suspect" if verdict.category == "hang" else "ranks" if len(verdict.ranks) > 1 else "rank"
    value = Text(ranks, style="bold")
    if diagnosis.ranks.expected:
        value.append(f"  (of {diagnosis.ranks.expected})", style="dim")
    if len(verdict.ranks) > 1 and verdict.rank is not None:
        value.append(f"  first: {verdict.rank}", style="dim")
    return label, value


def _job_fact(diagnosis: Diagnosis) -> tuple[str, Text] | None:
    job = diagnosis.job
    parts = [str(p) for p in (job.id, job.state, job.exit_code and f"exit {job.exit_code}", job.elapsed) if p]
    if job.nodes:
        parts.append("nodes " + ", ".join(map(str, job.nodes)))
    return ("job", _text("  ".join(parts))) if parts else None


def _verdict_facts(diagnosis: Diagnosis) -> list[tuple[str, Text] | None]:
    verdict = diagnosis.verdict
    confidence = Text(_line(verdict.confidence, 40), style=_CONFIDENCE_STYLE.get(str(verdict.confidence), ""))
    if verdict.pattern:
        confidence.append(f"  pattern {_line(verdict.pattern, 80)}", style="dim")
    return [
        _rank_fact(diagnosis),
        ("host", _text(verdict.host, "bold")) if verdict.host else None,
        ("error", _text(verdict.exception, "bold red")) if verdict.exception else None,
        ("at", _text(place(verdict.location.file, verdict.location.line))) if verdict.location else None,
        ("time", _text(verdict.time)) if verdict.time else None,
        ("confidence", confidence) if verdict.confidence else None,
        _job_fact(diagnosis),
    ]


def _verdict_panel(diagnosis: Diagnosis) -> Panel:
    verdict = diagnosis.verdict
    style = _category_style(verdict)
    mark = "✓" if verdict.category == "ok" else "✗"
    heading = Text(f"{mark} ", style=style)
    heading.append_text(_text(verdict.title or "(no title)", "bold"))
    facts = _grid(None, None)
    for fact in _verdict_facts(diagnosis):
        if fact is not None:
            facts.add_row(*fact)
    kind = " / ".join(_line(part, 40) for part in (verdict.category, verdict.subcategory) if part)
    body = Group(heading, Text(""), facts) if facts.row_count else heading
    return Panel(body, title=Text(kind, style=style), title_align="left", border_style=style, box=ROUNDED)


# --- sections --------------------------------------------------------------------------------------


def _explanation(verdict: Verdict) -> RenderableType | None:
    text = str(verdict.explanation or "").strip()
    return Text(_visible(text)) if text else None


def _ranks(diagnosis: Diagnosis) -> RenderableType | None:
    summary = diagnosis.ranks
    if not knows_ranks(summary):
        return None
    expected = str(summary.expected) if summary.expected is not None else "unknown"
    grid = _grid(None, None)
    grid.add_row("expected", Text(f"{expected}   seen {ranks_text(summary.seen) or NONE}"))
    for label, ranks, count in rank_rows(summary):
        grid.add_row(label, Text(ranks if not count else f"{ranks}   ({count})", style="bold" if count else ""))
    return grid


def _evidence(evidence: Sequence[Evidence]) -> RenderableType | None:
    blocks: list[RenderableType] = []
    for group in group_evidence(evidence):
        places = _grid(None, None)
        for rank, where in group.places:
            places.add_row(f"rank {rank if rank is not None else '?'}", _lines(where))
        blocks += [_text(group.text, "bold"), Padding(places, (0, 0, 1, 2))]
    if blocks:  # a blank line separates groups, not the last group from the next section
        blocks[-1] = Padding(places, (0, 0, 0, 2))
    return Group(*blocks) if blocks else None


def _symptom(symptom: Symptom) -> RenderableType:
    ranks = ranks_text(symptom.ranks)
    head = _text(symptom.kind or "unknown", "bold")
    head.append(f"   ranks {ranks}" if ranks else "   ranks unknown", style="")
    example = Text(_line(symptom.example), style="dim", no_wrap=True, overflow="ellipsis")
    return Group(head, example)


def _symptoms(symptoms: Sequence[Symptom]) -> RenderableType | None:
    if not symptoms:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    for symptom in symptoms:
        grid.add_row(f"×{symptom.count}", _symptom(symptom))
    return grid


def _detail_table(section: DetailSection) -> Table:
    table = Table(box=ROUNDED, show_edge=False, pad_edge=False, header_style="bold")
    for name in section.header:
        table.add_column(_line(name, 40), overflow="fold")
    for row in section.rows:
        suspect = "(suspect)" in row[0]
        table.add_row(*(_text(cell) for cell in row), style="bold yellow" if suspect else None)
    return table


def _detail(section: DetailSection) -> RenderableType:
    parts: list[RenderableType] = [Text(_line(section.title, 80), style="bold")]
    if section.facts:
        facts = _grid(None, None)
        for label, value in section.facts:
            facts.add_row(_line(label, 60), _text(value))
        parts.append(facts)
    if section.header:
        parts.append(_detail_table(section))
    return Padding(Group(*parts), (0, 0, 1, 0))


def _details(diagnosis: Diagnosis) -> RenderableType | None:
    sections = detail_sections(diagnosis.details)
    return Group(*(_detail(s) for s in sections)) if sections else None


def _fix(fix: Fix) -> RenderableType:
    parts: list[RenderableType] = [_with_code(fix.title or "(untitled fix)")]
    if fix.detail:
        parts.append(_text(fix.detail, "dim"))
    if fix.command:
        parts.append(Text(f"$ {_line(fix.command)}", style=_CODE_STYLE, overflow="fold"))
    return Group(*parts)


def _fixes(fixes: Sequence[Fix]) -> RenderableType | None:
    if not fixes:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True, style="bold")
    grid.add_column()
    for number, fix in enumerate(fixes, 1):
        grid.add_row(f"{number}.", _fix(fix))
    return grid


def _inputs(diagnosis: Diagnosis) -> RenderableType:
    inputs = diagnosis.inputs
    paths = ", ".join(_line(p, 120) for p in inputs.paths) or NONE
    summary = Text(f"{paths}   {plural(inputs.files, 'file')}, {human_bytes(inputs.bytes)}", overflow="fold")
    if not inputs.warnings:
        return summary
    warnings = Table.grid(padding=(0, 1))
    warnings.add_column(no_wrap=True, style="bold yellow")
    warnings.add_column(style="yellow")
    for warning in inputs.warnings[:MAX_WARNINGS]:
        warnings.add_row("!", _text(warning))
    if len(inputs.warnings) > MAX_WARNINGS:
        warnings.add_row("!", Text(f"… and {len(inputs.warnings) - MAX_WARNINGS} more warnings"))
    return Group(summary, warnings)


def _report(diagnosis: Diagnosis) -> list[RenderableType]:
    """Verdict panel, then sections in the order a responder needs them; empty sections are left out."""
    sections = [
        ("Why", _explanation(diagnosis.verdict)),
        ("Ranks", _ranks(diagnosis)),
        ("Evidence", _evidence(diagnosis.evidence)),
        ("Symptoms on other ranks (victims)", _symptoms(diagnosis.symptoms)),
        ("Details", _details(diagnosis)),
        ("Fixes", _fixes(diagnosis.fixes)),
        ("Inputs", _inputs(diagnosis)),
    ]
    blocks: list[RenderableType] = [_verdict_panel(diagnosis)]
    for title, body in sections:
        if body is not None:
            blocks += [
                Text(""),
                Rule(Text(title, style="bold"), align="left", style="dim"),
                Padding(body, (0, 0, 0, 2)),
            ]
    return blocks


def _console(width: int | None, color: bool, capture: bool) -> Console:
    """No colour when asked or when not a TTY (rich detects that; NO_COLOR is honoured too)."""
    return Console(
        file=io.StringIO() if capture else None,
        width=width,
        color_system=("standard" if capture else "auto") if color else None,
        force_terminal=color if capture else None,
        highlight=False,
        markup=False,
        emoji=False,
    )


def render_terminal(
    diagnosis: Diagnosis, width: int | None = None, color: bool = True, capture: bool = False
) -> str | None:
    """Print the report, or return it as text when capture=True (goldens, --output FILE)."""
    if not capture and not sys.stdout.isatty():
        # Piped into a file or a ticket: no padding to the terminal width, no escape codes.
        sys.stdout.write(render_terminal(diagnosis, width=width, color=False, capture=True) or "")
        return None
    console = _console(width, color, capture)
    for block in _report(diagnosis):
        console.print(block)
    if not capture:
        return None
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.split("\n"))
