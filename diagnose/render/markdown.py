"""Markdown view for tickets: a verdict a person reads in ten seconds, the proof folded underneath.

Log text only ever appears inside code fences made longer than any backtick run in it, and every other
string is escaped, so a hostile log line cannot close a <details> block, start a table or become a link.

The plain facts (evidence grouping, detail sections, sizes) come from facts.py, shared with the terminal.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from diagnose.model import Diagnosis, Evidence, Fix, Verdict
from diagnose.render.facts import (
    NONE,
    detail_sections,
    group_evidence,
    human_bytes,
    knows_ranks,
    place,
    plural,
    rank_rows,
    ranks_text,
)

LONG_LINE = 1000  # a ticket may scroll sideways, but a megabyte of minified JSON helps nobody


_SPECIAL = re.compile(r"([\\`*_\[\]{}|~#!])")
_TICKS = re.compile(r"`+")
_CODE = re.compile(r"`([^`\n]+)`")
_SPACE = re.compile(r"\s+")


def escape(text: object) -> str:
    """One line of inert Markdown: newlines flattened, emphasis/link/table/HTML characters neutralised."""
    flat = _SPACE.sub(" ", str(text))
    return html.escape(_SPECIAL.sub(r"\\\1", flat), quote=False)


def _longest_ticks(text: str) -> int:
    return max((len(run) for run in _TICKS.findall(text)), default=0)


def code_span(text: object) -> str:
    """An inline code span that survives backticks inside it (CommonMark: use a longer backtick run)."""
    flat = " ".join(str(text).split())
    if not flat:
        return ""
    ticks = "`" * (_longest_ticks(flat) + 1)
    pad = " " if flat[0] == "`" or flat[-1] == "`" else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def _clip(line: str) -> str:
    return line if len(line) <= LONG_LINE else line[: LONG_LINE - 1] + "…"


def fence(text: object, info: str = "", indent: str = "") -> list[str]:
    """A fenced block no line of the text can close: the fence is longer than any backtick run in it."""
    body = [_clip(line) for line in str(text).splitlines()] or [""]
    ticks = "`" * max(3, _longest_ticks(str(text)) + 1)
    return [indent + ticks + info, *(indent + line for line in body), indent + ticks]


def _inline(text: object) -> str:
    """Pattern-authored prose: `backticked` commands stay code spans, everything else is escaped."""
    pieces = _CODE.split(str(text))
    return "".join(code_span(piece) if i % 2 else escape(piece) for i, piece in enumerate(pieces)).strip()


def _mark(verdict: Verdict) -> str:
    return "✅" if verdict.category == "ok" else "❌"


def _headline(verdict: Verdict) -> str:
    kind = "/".join(escape(part) for part in (verdict.category, verdict.subcategory) if part)
    title = escape(verdict.title).strip() or "(no title)"
    return f"**{_mark(verdict)} {kind}: {title}**" if kind else f"**{_mark(verdict)} {title}**"


def _who(diagnosis: Diagnosis) -> str:
    """Rank, host, confidence and code location on one line: what someone triaging asks first."""
    verdict, facts = diagnosis.verdict, []
    label = "Suspect rank" if verdict.category == "hang" else "Rank"
    ranks = ranks_text(verdict.ranks) or (str(verdict.rank) if verdict.rank is not None else "")
    if ranks:
        plural = "s" if len(verdict.ranks) > 1 else ""
        of = f" of {diagnosis.ranks.expected}" if diagnosis.ranks.expected else ""
        facts.append(f"{label}{plural} **{escape(ranks)}**{of}")
    else:
        facts.append("Rank unknown")
    if verdict.host:
        facts.append(f"host {code_span(verdict.host)}")
    if verdict.location is not None:
        facts.append(f"at {code_span(place(verdict.location.file, verdict.location.line))}")
    if verdict.confidence:
        facts.append(f"confidence **{escape(verdict.confidence)}**")
    return " · ".join(facts)


def _fix_line(fix: Fix) -> str:
    line = _inline(fix.title) or "(untitled fix)"
    if fix.command and fix.command not in str(fix.title):
        line += f" {code_span(fix.command)}"
    return line


def _summary(diagnosis: Diagnosis) -> list[str]:
    lines = [_headline(diagnosis.verdict), "", _who(diagnosis), ""]
    if diagnosis.verdict.exception:
        lines += [*fence(diagnosis.verdict.exception), ""]
    if diagnosis.fixes:
        lines += [f"**First fix:** {_fix_line(diagnosis.fixes[0])}", ""]
    return lines


def _details_block(summary: str, body: list[str]) -> list[str]:
    """A collapsible section; the blank lines make GitHub/GitLab render Markdown inside it."""
    while body and not body[-1]:
        body = body[:-1]
    return [f"<details><summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]


def _why(verdict: Verdict) -> list[str]:
    return [_inline(p) for p in str(verdict.explanation or "").split("\n\n") if p.strip()]


def _ranks_body(diagnosis: Diagnosis) -> list[str]:
    summary = diagnosis.ranks
    expected = str(summary.expected) if summary.expected is not None else "unknown"
    lines = [f"Expected {escape(expected)}, seen {escape(ranks_text(summary.seen) or NONE)}.", ""]
    lines += ["| role | ranks | count |", "| --- | --- | ---: |"]
    lines += [f"| {label} | {escape(ranks)} | {count} |" for label, ranks, count in rank_rows(summary)]
    return lines


def _evidence_body(evidence: Sequence[Evidence]) -> list[str]:
    lines: list[str] = []
    for group in group_evidence(evidence):
        for rank, places in group.places:
            who = f"rank {rank}" if rank is not None else "rank unknown"
            lines.append(f"- {escape(who)}: " + ", ".join(code_span(p) for p in places))
        lines += ["", *fence(group.text), ""]
    return lines


def _symptoms_body(diagnosis: Diagnosis) -> list[str]:
    lines: list[str] = []
    for symptom in diagnosis.symptoms:
        ranks = ranks_text(symptom.ranks)
        where = f"ranks {escape(ranks)}" if ranks else "unknown ranks"
        kind = escape(symptom.kind).strip() or "unknown"
        lines += [f"**{kind}** on {where}, {escape(plural(symptom.count, 'line'))}, e.g.:", ""]
        lines += [*fence(str(symptom.example).strip()), ""]
    return lines


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(escape(h) for h in header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(escape(cell) or " " for cell in row) + " |" for row in rows]


def _details_body(details: object) -> list[str]:
    lines: list[str] = []
    for section in detail_sections(details):
        lines += [f"**{escape(section.title)}**", ""]
        lines += [f"- {escape(label)}: {escape(value)}" for label, value in section.facts]
        if section.header:
            lines += ["", *_table(section.header, section.rows)]
        lines.append("")
    return lines


def _fixes_body(fixes: Sequence[Fix]) -> list[str]:
    lines: list[str] = []
    for number, fix in enumerate(fixes, 1):
        marker = f"{number}. "
        indent = " " * len(marker)
        lines.append(marker + (_inline(fix.title) or "(untitled fix)"))
        if fix.detail:
            lines += ["", indent + escape(fix.detail)]
        if fix.command:
            lines += ["", *fence(fix.command, "sh", indent), ""]
    return lines


def _inputs_body(diagnosis: Diagnosis) -> list[str]:
    inputs, job = diagnosis.inputs, diagnosis.job
    paths = ", ".join(code_span(p) for p in inputs.paths) or NONE
    lines = [f"- paths: {paths}", f"- {escape(plural(inputs.files, 'file'))}, {escape(human_bytes(inputs.bytes))}"]
    facts = [("job", job.id), ("state", job.state), ("exit code", job.exit_code), ("elapsed", job.elapsed)]
    lines += [f"- {label}: {escape(value)}" for label, value in facts if value]
    if job.nodes:
        lines.append(f"- nodes: {escape(', '.join(map(str, job.nodes)))}")
    lines += [f"- warning: {escape(w)}" for w in inputs.warnings]
    return lines


def _collapsibles(diagnosis: Diagnosis) -> list[str]:
    d = diagnosis
    sections = detail_sections(d.details)
    warnings = len(d.inputs.warnings)
    plan: list[tuple[str, list[str], bool]] = [
        ("Why this happens", _why(d.verdict), bool(_why(d.verdict))),
        ("Ranks", _ranks_body(d), knows_ranks(d.ranks)),
        (f"Evidence ({plural(len(d.evidence), 'log line')})", _evidence_body(d.evidence), bool(d.evidence)),
        (f"Symptoms on other ranks ({plural(len(d.symptoms), 'kind')})", _symptoms_body(d), bool(d.symptoms)),
        ("Details: " + ", ".join(s.title for s in sections), _details_body(d.details), bool(sections)),
        (f"All fixes ({len(d.fixes)})", _fixes_body(d.fixes), bool(d.fixes)),
        (f"Inputs ({plural(warnings, 'warning')})" if warnings else "Inputs", _inputs_body(d), True),
    ]
    return [line for summary, body, shown in plan if shown for line in _details_block(summary, body)]


def render_markdown(diagnosis: Diagnosis) -> str:
    """The whole report as GitHub/GitLab-flavoured Markdown for an issue or chat."""
    return "\n".join([*_summary(diagnosis), *_collapsibles(diagnosis)]).rstrip() + "\n"
