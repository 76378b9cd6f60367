"""Markdown view for tickets: a verdict a person reads in ten seconds, the proof folded underneath.

Log text only ever appears inside code fences made longer than any backtick run in it, and every other
string is escaped, so a hostile log line cannot close a <details> block, start a table or become a link.

The plain-fact helpers in the first half (evidence grouping, detail sections, sizes) are shared with the
terminal view so that both views always say the same thing; they return strings, never markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnose.api import format_ranks
from diagnose.model import Diagnosis, Evidence, Fix, RankSummary, Verdict

LONG_LINE = 1000  # a ticket may scroll sideways, but a megabyte of minified JSON helps nobody
NONE = "—"


# --- plain facts, shared with the terminal view -------------------------------------------------------


@dataclass(frozen=True)
class EvidenceGroup:
    """One distinct log line and every rank and file:line that printed it."""

    text: str
    places: tuple[tuple[int | None, tuple[str, ...]], ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(rank for rank, _ in self.places if isinstance(rank, int))


@dataclass(frozen=True)
class DetailSection:
    """A category detail as label/value facts and an optional table, so each view only lays it out."""

    title: str
    facts: tuple[tuple[str, str], ...] = ()
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


def place(file: object, line: object) -> str:
    """'file:line', the form editors and terminals turn into a jump target."""
    return f"{file}:{line}" if line is not None else str(file)


def ranks_text(ranks: Iterable[object]) -> str:
    """Rank ranges ('0-511'), tolerating junk so a malformed Diagnosis still renders."""
    return format_ranks(r for r in ranks if isinstance(r, int) and not isinstance(r, bool))


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def human_bytes(count: object) -> str:
    if not isinstance(count, int | float) or isinstance(count, bool):
        return str(count)
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(count)


def group_evidence(evidence: Iterable[Evidence]) -> list[EvidenceGroup]:
    """The same error copied into slurm-N.err, error.json and stderr.log is one claim with three proofs."""
    groups: dict[str, dict[int | None, list[str]]] = {}
    for item in evidence:
        places = groups.setdefault(str(item.text).strip(), {}).setdefault(item.rank, [])
        places.append(place(item.file, item.line))
    return [
        EvidenceGroup(text, tuple((rank, tuple(places)) for rank, places in by_rank.items()))
        for text, by_rank in groups.items()
    ]


def rank_rows(summary: RankSummary) -> list[tuple[str, str, int]]:
    """failed / victims / silent as (label, ranges, count); empty roles are kept so absence is visible."""
    return [
        (label, ranks_text(ranks) or NONE, len(ranks))
        for label, ranks in (("failed", summary.failed), ("victims", summary.victims), ("silent", summary.silent))
    ]


def knows_ranks(summary: RankSummary) -> bool:
    """A pasted single log often has no rank at all; an all-dash table would only be noise."""
    return any((summary.expected, summary.seen, summary.failed, summary.victims, summary.silent))


def plain(value: object) -> str:
    """Any JSON-ish detail value as one short line."""
    if value is None:
        return NONE
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={plain(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(plain(v) for v in value)
    return str(value)


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gib(value: object) -> str:
    number = _number(value)
    return f"{number:.2f} GiB" if number is not None else plain(value)


def _rest(values: Mapping[Any, Any], used: Iterable[str]) -> list[tuple[str, str]]:
    """Keys a view does not know yet still show up, so a new engine field is never silently dropped."""
    skip = set(used)
    return [(str(k), plain(v)) for k, v in values.items() if k not in skip]


def _oom_section(values: Mapping[Any, Any]) -> DetailSection:
    labels = {"requested": "tried to allocate", "free": "free", "total": "GPU capacity", "short_by_gib": "short by"}
    facts = [(label, _gib(values[key])) for key, label in labels.items() if key in values]
    if "gpu" in values:
        facts.append(("GPU", plain(values["gpu"])))
    return DetailSection("GPU memory", tuple(facts + _rest(values, [*labels, "gpu"])))


def _remainder(total: int | None, divisor: int | None) -> str | None:
    if total is None or not divisor:
        return None
    left = total % divisor
    return f"{total} % {divisor} = {left}" + (" (must be 0)" if left else " (ok)")


def _parallelism_section(values: Mapping[Any, Any]) -> DetailSection:
    """Redo Megatron's arithmetic in the open: the user sees which number to change."""
    heads, tp = _whole(values.get("num_attention_heads")), _whole(values.get("tensor_model_parallel_size"))
    world, tp3 = _whole(values.get("world_size")), _whole(values.get("tp"))
    pp, cp = _whole(values.get("pp")) or 1, _whole(values.get("cp")) or 1
    facts: list[tuple[str, str]] = []
    if (heads_left := _remainder(heads, tp)) is not None:
        facts.append(("heads % TP", heads_left))
    if "valid_tp_sizes" in values:
        facts.append(
            (f"TP sizes dividing {heads if heads is not None else 'the'} heads", plain(values["valid_tp_sizes"]))
        )
    if world is not None and tp3:
        model = tp3 * pp * cp
        facts.append(("TP x PP x CP", f"{tp3} x {pp} x {cp} = {model}"))
        facts.append(("WORLD_SIZE % (TP x PP x CP)", _remainder(world, model) or NONE))
        if world % model == 0:
            facts.append(("data parallel size", str(world // model)))
    used = ["num_attention_heads", "tensor_model_parallel_size", "valid_tp_sizes"]
    used += ["world_size", "tp", "pp", "cp", "model_parallel_size"] if world is not None and tp3 else []
    return DetailSection("Parallelism arithmetic", tuple(facts + _rest(values, used)))


_HANG_ALWAYS = (("seq", "SeqNum"), ("op", "op"), ("enqueued", "enqueued"), ("completed", "completed"))
_HANG_OPTIONAL = {"numel_in": "numel", "timeout_ms": "timeout ms", "ran_ms": "ran ms", "note": "note"}


def _hang_columns(table: Sequence[Mapping[Any, Any]]) -> list[tuple[str, str]]:
    present: dict[str, None] = {}
    for row in table:
        present.update(dict.fromkeys(str(k) for k in row if k != "rank"))
    always = [key for key, _ in _HANG_ALWAYS]
    return [*_HANG_ALWAYS, *((key, _HANG_OPTIONAL.get(key, key)) for key in present if key not in always)]


def _hang_section(values: Mapping[Any, Any]) -> DetailSection:
    """Ranks with identical rows collapse into one range, so 512 victims are one line and the suspect stands out."""
    raw = values.get("table")
    table = [row for row in raw if isinstance(row, Mapping)] if isinstance(raw, list | tuple) else []
    suspects = values.get("suspects")
    suspect_set = {r for r in suspects if isinstance(r, int)} if isinstance(suspects, list | tuple) else set()
    columns = _hang_columns(table)
    grouped: dict[tuple[bool, tuple[str, ...]], list[object]] = {}
    for row in table:
        cells = tuple(plain(row.get(key)) if key in row else NONE for key, _ in columns)
        rank = row.get("rank")
        suspect = isinstance(rank, int) and rank in suspect_set
        grouped.setdefault((suspect, cells), []).append(rank)
    rows = tuple(
        (_rank_cell(ranks) + (" (suspect)" if suspect else ""), *cells) for (suspect, cells), ranks in grouped.items()
    )
    facts = [("reason", plain(values.get("reason")))] if "reason" in values else []
    if isinstance(suspects, list | tuple):
        facts.append(("suspects", ranks_text(suspects) or "none"))
    header = ("rank", *(label for _, label in columns)) if rows else ()
    return DetailSection("Hang analysis", tuple(facts + _rest(values, ["table", "suspects", "reason"])), header, rows)


def _rank_cell(ranks: Sequence[object]) -> str:
    whole = ranks_text(ranks)
    odd = [plain(r) for r in ranks if not (isinstance(r, int) and not isinstance(r, bool))]
    return ",".join(part for part in (whole, *odd) if part) or NONE


_SECTIONS = {"oom": _oom_section, "parallelism": _parallelism_section, "hang": _hang_section}


def detail_sections(details: object) -> list[DetailSection]:
    """Category details as sections; unknown keys fall back to label/value facts instead of vanishing."""
    if not isinstance(details, Mapping):
        return [DetailSection("Details", (("value", plain(details)),))] if details else []
    sections = []
    for key, value in details.items():
        build = _SECTIONS.get(key)
        if build is not None and isinstance(value, Mapping):
            sections.append(build(value))
        elif isinstance(value, Mapping):
            sections.append(DetailSection(str(key).replace("_", " ").capitalize(), tuple(_rest(value, ()))))
        else:
            sections.append(DetailSection(str(key).replace("_", " ").capitalize(), (("value", plain(value)),)))
    return sections


# --- Markdown ----------------------------------------------------------------------------------------

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
