"""Plain facts both human views show: evidence grouped by line, detail sections, sizes and ranges.

Shared so the terminal and Markdown reports always say the same thing; everything here returns plain
strings and tuples, never markup, and knows nothing of rich or Markdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnose.model import Evidence, RankSummary
from diagnose.rankset import format_ranks

NONE = "—"


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


def _related_section(values: Sequence[Any]) -> DetailSection:
    """Lines printed with the root exception that name its precise cause (NCCL's "Last error: ...")."""
    facts = [
        (plain(item.get("pattern")), plain(item.get("text")).strip())
        if isinstance(item, Mapping)
        else ("", plain(item))
        for item in values
    ]
    return DetailSection("Printed with it", tuple(facts))


_SECTIONS = {"oom": _oom_section, "parallelism": _parallelism_section, "hang": _hang_section}


def detail_sections(details: object) -> list[DetailSection]:
    """Category details as sections; unknown keys fall back to label/value facts instead of vanishing."""
    if not isinstance(details, Mapping):
        return [DetailSection("Details", (("value", plain(details)),))] if details else []
    sections = []
    for key, value in details.items():
        build = _SECTIONS.get(key)
        if key == "related" and isinstance(value, list | tuple):
            sections.append(_related_section(value))
        elif build is not None and isinstance(value, Mapping):
            sections.append(build(value))
        elif isinstance(value, Mapping):
            sections.append(DetailSection(str(key).replace("_", " ").capitalize(), tuple(_rest(value, ()))))
        else:
            sections.append(DetailSection(str(key).replace("_", " ").capitalize(), (("value", plain(value)),)))
    return sections
