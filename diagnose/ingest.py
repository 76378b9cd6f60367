"""Turn every log file into rows of the events frame, in parallel over files.

Each worker reads one file whole, lets the scanner find the hit lines, rebuilds tracebacks and
torchrun summaries only around those hits, and returns plain rows; the frame is built once at the end.
Rows carry every identity a line has (prefix rank, local rank, srun task, host, file-layout rank) side
by side: reconciling them is ranks.py's job, not guessed here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl
import regex

from diagnose.discover import LogFile
from diagnose.patterns import group_value
from diagnose.prefixes import BRACKET_FIELDS_RANK, EMPTY, GLOG_RANK_HEADER, Prefix, split_prefix
from diagnose.rankset import parse_ranks
from diagnose.readers import encodable, read_log
from diagnose.scan import Hit, Scanner
from diagnose.timestamps import from_epoch, parse_time
from diagnose.tracebacks import (
    Traceback,
    chained_cause,
    frames_above,
    frames_below,
    output_phase,
    parse_error_json,
    parse_failures,
    parse_first_process,
    parse_mpi_abort,
    parse_traceback,
    phase_of,
)

MAX_TEXT = 4000  # a runaway line is shown cut, never matched past this
CENSUS_BYTES = 1 << 16  # head and tail: every rank prints at start-up, and the tail shows who was still there
_CENSUS = regex.compile(rb"(?m)^[ \t]{0,6}(?:(\d{1,6}): )?\[([A-Za-z_]+?)(\d{1,6})\]:(?:\[rank(\d{1,7})\]:)?")

_TASK_CENSUS = regex.compile(rb"(?m)^[ \t]{0,6}(\d{1,6}): (?!\[)")

SCHEMA: dict[str, Any] = {
    "file": pl.Utf8,
    "line": pl.Int64,
    "kind": pl.Utf8,  # pattern | traceback | exit | error_json
    "pattern": pl.Utf8,
    "rank": pl.Int64,  # global rank from the line itself ([rankN], "Rank N" in the message)
    "file_rank": pl.Int64,  # global rank from the manifest
    "local_rank": pl.Int64,
    "task": pl.Int64,  # srun --label task id
    "host": pl.Utf8,
    "run_dir": pl.Utf8,
    "attempt": pl.Int64,
    "stream": pl.Utf8,
    "ts": pl.Datetime("us"),
    "text": pl.Utf8,
    "exception": pl.Utf8,  # tracebacks / error.json: the exception line
    "exception_line": pl.Int64,
    "code_file": pl.Utf8,  # innermost user frame of a traceback
    "code_line": pl.Int64,
    "exitcode": pl.Int64,
    "pid": pl.Int64,  # worker pid (torchrun's summary, NCCL's line header): ties launcher and NCCL lines to a rank
    "device": pl.Int64,  # CUDA device from NCCL's line header: ties a process to its GPU's bus id
    "signal": pl.Utf8,
    "torchrun_root": pl.Boolean,
    "fields": pl.Utf8,  # JSON of the pattern's named groups
}


@dataclass(frozen=True)
class FileResult:
    rows: list[dict[str, Any]]
    census: set[tuple[int | None, int | None, int | None]]  # (task, local_rank, rank) seen in prefixes
    size: int
    warnings: tuple[str, ...]


def _base_row(file: LogFile, display: str, line: int, prefix: Prefix) -> dict[str, Any]:
    return {
        "file": display,
        "line": line,
        "rank": prefix.rank,
        "file_rank": file.rank,
        "local_rank": prefix.local_rank if prefix.local_rank is not None else file.local_rank,
        "task": prefix.task,
        "host": prefix.host or file.host,
        "run_dir": file.run_dir,
        "attempt": file.attempt,
        "stream": file.stream,
        "pid": prefix.pid,
        "device": prefix.device,
    }


_TEXT_RANK = regex.compile(r"\[(?:PG (?:ID )?(\d+)[^\]]*?)?Rank (\d{1,7})\]")
# torch's sentences about the writer's own state end "... on rank N." (FSDP's "Failed to clone() tensor with
# name X on rank 1.", "NCCL communicator was aborted on rank 0.")
_ON_RANK = regex.compile(r"\bon rank (\d{1,7})\.(?:\s|$)")


def _field_rank(fields: dict[str, str], text: str) -> int | None:
    """A rank named in the message itself: a pattern's `rank` group, else c10d's `[Rank N]` / `[PG … Rank N]`."""
    value = group_value(fields, "rank")
    if value is not None and value.isdigit():
        return int(value)
    found = _TEXT_RANK.search(text)
    if found is None:
        sentence = _ON_RANK.search(text)
        return int(sentence.group(1)) if sentence else None
    if found.group(1) not in (None, "0"):
        return None  # a rank inside a sub-group (PG ID 13 ... Rank 0) is not the global rank
    return int(found.group(2))


_WRAP_WIDTH = 80
_WRAP_PIECES = 8  # the most pieces of one wrapped line put back together


def _with_wrapped_head(hit: Hit, data: bytes, scanner: Scanner) -> Hit:
    """A long line the terminal wrapped before it was pasted: the hit is its tail, and the line above holds
    the head (DeepSpeed's `sigkill_handler] [... '--local_rank=7', ...` / `...] exits with return code = -9`).
    When the two joined match a signature with more of its fields, the hit takes those fields."""
    missing = [
        (pattern_id, fields)
        for pattern_id, fields in hit.fields
        if (pattern := scanner.patterns.get(pattern_id)) is not None and len(pattern.compiled.groupindex) > len(fields)
    ]
    if not missing:
        return hit  # every named group already found: nothing a head could add
    head_start = data.rfind(b"\n", 0, max(hit.start - 1, 0)) + 1
    width = hit.start - 1 - head_start
    if width < _WRAP_WIDTH:
        return hit  # terminals wrap long lines only
    # a line wrapped several times: every piece above the tail has the terminal's full width
    for _ in range(_WRAP_PIECES - 1):
        above = data.rfind(b"\n", 0, max(head_start - 1, 0)) + 1
        if head_start == 0 or head_start - 1 - above != width:
            break
        head_start = above
    head = data[head_start : hit.start - 1].decode("utf-8", "replace").replace("\r\n", "\n").replace("\n", "")
    if not head.strip() or len(head) > MAX_TEXT:
        return hit
    head_prefix, head_text = split_prefix(head)
    joined = head_text + hit.text
    better = []
    for pattern_id, fields in hit.fields:
        pattern = scanner.patterns.get(pattern_id)
        found = pattern.fields(joined) if pattern is not None else None
        better.append((pattern_id, found if found is not None and len(found) > len(fields) else fields))
    if better == list(hit.fields):
        return hit
    return replace(hit, fields=tuple(better), prefix=head_prefix)


def _pattern_rows(file: LogFile, display: str, hit: Hit, year: int) -> list[dict[str, Any]]:
    ts = parse_time(hit.text, year) or (parse_time(hit.prefix.time, year) if hit.prefix.time else None)
    rows = []
    for pattern_id, fields in hit.fields:
        row = _base_row(file, display, hit.line_no, hit.prefix)
        if row["rank"] is None:
            row["rank"] = _field_rank(fields, hit.text)
        if row["local_rank"] is None and fields.get("local_rank", "").isdigit():
            row["local_rank"] = int(fields["local_rank"])
        if row["host"] is None and fields.get("host"):
            row["host"] = fields["host"]
        row.update(kind="pattern", pattern=pattern_id, ts=ts, text=hit.text[:MAX_TEXT], fields=json.dumps(fields))
        rows.append(row)
    return rows


# torch.distributed.checkpoint's CheckpointException names the rank after each traceback's header: the rank whose
# error it is, also where another rank printed it (`[rank0]: Traceback (most recent call last): (RANK 1)`)
_HEADER_RANK = regex.compile(r"Traceback \(most recent call last\): \(RANK (\d{1,7})\)")


def _traceback_rows(file: LogFile, display: str, data: bytes, hit: Hit) -> list[dict[str, Any]]:
    tb = parse_traceback(data, hit.start, hit.line_no, hit.prefix)
    row = _base_row(file, display, hit.line_no, tb.prefix)
    if (named := _HEADER_RANK.search(hit.text)) is not None:
        row["rank"] = int(named.group(1))
    return [_fill_traceback(row, hit.text, tb, tb.exception_line)]


def _fill_traceback(row: dict[str, Any], text: str, tb: Traceback, exception_line: int | None) -> dict[str, Any]:
    """One row shape for every rebuilt traceback, with or without its `Traceback` header or exception line."""
    frame = tb.user_frame
    row.update(
        kind="traceback",
        text=text[:MAX_TEXT],
        exception=tb.exception[:MAX_TEXT] if tb.exception else None,
        exception_line=exception_line,
        code_file=frame.path if frame else None,
        code_line=frame.line if frame else None,
        fields=json.dumps(
            {
                "exc_type": tb.exc_type or "",
                "phase": output_phase(tb.exc_type, tb.source) or phase_of(tb.frames, cut=not tb.exception) or "",
                # a traceback cut before its exception line still shows the statement that raised (diagnose/decide.py)
                **({"source": tb.source.strip()[:MAX_TEXT]} if tb.source and not tb.exception else {}),
            }
        ),
    )
    return row


# structural anchors (scan.ANCHORS) where a launcher reports how processes exited
_LAUNCHER_REPORTS = frozenset({"child-failed", "first-process", "mpi-abort"})


def _exit_rows(file: LogFile, display: str, data: bytes, hit: Hit, year: int) -> list[dict[str, Any]]:
    rows = []
    if "first-process" in hit.pattern_ids:
        first = parse_first_process(data, hit.start, hit.line_no, hit.prefix)
        records = [first] if first is not None else []
    elif "mpi-abort" in hit.pattern_ids:
        aborted = parse_mpi_abort(data, hit.start, hit.line_no, hit.prefix)
        records = [aborted] if aborted is not None else []
    else:
        records = parse_failures(data, hit.start, hit.line_no, hit.prefix)
    for record in records:
        row = _base_row(file, display, record.line, hit.prefix)
        row.update(
            kind="exit",
            rank=record.rank,
            local_rank=record.local_rank,
            host=record.host or row["host"],
            ts=parse_time(record.time or "", year),
            text=f"exitcode {record.exitcode}" + (f" ({record.signal})" if record.signal else ""),
            exitcode=record.exitcode,
            pid=record.pid,
            signal=record.signal,
            torchrun_root=record.torchrun_root,
            end_line=record.end_line,
            fields=json.dumps({"other_failure": True}) if record.other_failure else None,
        )
        rows.append(row)
    return rows


# messages their code follows with traceback.print_stack(): the frames printed under them are their stack
_PRINTS_STACK_BELOW = frozenset({"fsdp-unexpected-training-state"})


def _headless_tracebacks(
    file: LogFile, display: str, data: bytes, hits: list[Hit], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Exception lines with frames above them but no Traceback header (cut off in a paste)."""
    owned = {r["exception_line"] for r in rows if r["kind"] == "traceback"}
    out = []
    for hit in hits:
        if hit.line_no in owned:
            continue
        if "python-exception" in hit.pattern_ids:
            tb = (
                frames_above(data, hit.start, hit.line_no, hit.prefix)
                or frames_below(data, hit.start, hit.line_no, hit.prefix)
                or chained_cause(data, hit.start, hit.line_no, hit.prefix)
            )
        elif _PRINTS_STACK_BELOW & set(hit.pattern_ids):
            tb = frames_below(data, hit.start, hit.line_no, hit.prefix, upside_down=False)
        else:  # a signature's own exception line (`ArrowInvalid: ...`) that starts a chain
            tb = chained_cause(data, hit.start, hit.line_no, hit.prefix)
        if tb is None or (hit.text[:1].isspace() and not _indented_block(data, hit)):
            continue
        out.append(_fill_traceback(_base_row(file, display, tb.start_line, hit.prefix), hit.text, tb, hit.line_no))
    return out


def _indented_block(data: bytes, hit: Hit) -> bool:
    """An indented exception line ends a traceback only when the frame lines above it sit deeper: a traceback
    pasted with an extra indent as a whole (Python 3.13's `...<2 lines>...` elisions, a Markdown list item)."""
    own = len(hit.text) - len(hit.text.lstrip(" "))
    above_end = max(hit.start - 1, 0)
    above = data[data.rfind(b"\n", 0, above_end) + 1 : above_end].decode("utf-8", "replace")
    text = split_prefix(above.rstrip("\r"))[1]
    return bool(text.strip()) and len(text) - len(text.lstrip(" ")) > own


def _cut_tail_traceback(file: LogFile, display: str, data: bytes, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A paste that ends inside a traceback's frames, with neither its header nor its exception line: the
    frames still say where it failed (loading a checkpoint, in the data loader) and whose it was."""
    end = len(data)
    while end and data[end - 1 : end].isspace():  # no copy of the file: walk back over trailing blanks
        end -= 1
    if not end:
        return []
    last_start = data.rfind(b"\n", 0, end) + 1
    prefix, text = split_prefix(data[last_start:end].decode("utf-8", "replace").rstrip("\r"))
    if not text[:1].isspace():
        return []  # a paste cut inside a traceback ends on an indented frame or code line
    line_no = data.count(b"\n", 0, end) + 2  # the exception line that never came
    buf = data if end < len(data) else data + b"\n"  # the walk back reads whole lines
    tb = frames_above(buf, end + 1, line_no, prefix)
    if tb is None or any(
        r["kind"] == "traceback" and r["line"] <= tb.start_line <= (r["exception_line"] or r["line"]) for r in rows
    ):
        return []
    return [_fill_traceback(_base_row(file, display, tb.start_line, prefix), text.strip(), tb, None)]


_PROCESS_RANK_PATTERNS = {
    "duplicate-global-rank": "global_rank",
    "elastic-worker-ranks": "global_ranks",
    "process-rank-announced": "global_rank",  # or a later form's global_rank2, global_rank3
}


# SLURM's step daemon and srun write into the task's output file, but about the whole job (a cancel, a time limit)
_JOB_LEVEL_WRITERS = ("slurmstepd", "srun: ")


_INTERLEAVED_HEADERS = 2  # two "Traceback (most recent call last):" this close come from two writers


def _attribute_single_process(rows: list[dict[str, Any]]) -> None:
    """A log with no rank prefixes whose start-up lines name exactly one global rank (Lightning's
    `GLOBAL_RANK: 1`, torchelastic's `global_ranks=[1]` for a one-worker agent) is that one process's output,
    as a pod's or a task's log is: its unattributed lines are that rank's, except SLURM's own lines."""
    named: set[int] = set()
    for row in rows:
        key = _PROCESS_RANK_PATTERNS.get(row.get("pattern") or "")
        if key is not None:
            fields = json.loads(row["fields"])
            value = group_value(fields, key) or ""
            named |= parse_ranks(value)
    if len(named) != 1 or any(
        r["rank"] is not None or r["local_rank"] is not None or r["task"] is not None
        for r in rows
        if r.get("pattern") not in _PROCESS_RANK_PATTERNS
    ):
        return
    starts = sorted(r["line"] for r in rows if r["kind"] == "traceback")
    if any(later - earlier <= _INTERLEAVED_HEADERS for earlier, later in pairwise(starts)):
        return  # tracebacks begun on adjacent lines: several processes write here, not the one that named itself
    (rank,) = named
    _claim_unlabelled(rows, rank)


def _claim_unlabelled(rows: list[dict[str, Any]], rank: int) -> None:
    """The file is one process's output: its lines that name no rank are that rank's, but for SLURM's own and the
    launchers' exit records."""
    for row in rows:
        if row["kind"] != "exit" and row["rank"] is None and not row["text"].lstrip().startswith(_JOB_LEVEL_WRITERS):
            row["rank"] = rank


_OWN_HEADER_RANK = regex.compile(rb"(?m)^" + GLOG_RANK_HEADER.encode())
# torchrun's own records, written into the same file by its agent
_AGENT_RECORD = regex.compile(r"^(?:torchrun-|elastic-)|torch/distributed/elastic")


def _attribute_own_header(rows: list[dict[str, Any]], data: bytes) -> None:
    """A trainer whose logging header names its rank (`I1201 06:43:05.137 597 [1/2] train.py:41] ...`) also writes
    the unlabelled lines between its records (a kernel's device-side assert, an uncaught C++ exception): when every
    header in the file names the same rank, and nothing else labels a line, those lines are that rank's. The
    torchrun agent that shares the file (one worker per agent) keeps its own records."""
    named = set(_OWN_HEADER_RANK.findall(data[:CENSUS_BYTES])) | set(_OWN_HEADER_RANK.findall(data[-CENSUS_BYTES:]))
    if len(named) != 1:
        return
    rank = int(named.pop())
    own = [r for r in rows if r["kind"] != "exit" and not _AGENT_RECORD.search(f"{r.get('pattern') or ''} {r['text']}")]
    if any(r["local_rank"] is not None or r["task"] is not None or r["rank"] not in (None, rank) for r in own):
        return
    _claim_unlabelled(own, rank)


def _attribute_summary_rows(rows: list[dict[str, Any]]) -> None:
    """Lines inside a torchrun summary entry (its embedded traceback) belong to that entry's rank."""
    spans = [(r["line"], r["end_line"], r) for r in rows if r["kind"] == "exit"]
    for row in rows:
        if row["kind"] == "exit" or row["rank"] is not None:
            continue
        for begin, end, record in spans:
            if begin < row["line"] <= end:
                row["rank"], row["local_rank"] = record["rank"], record["local_rank"]
                row["host"] = row["host"] or record["host"]
                row["ts"] = row.get("ts") or record["ts"]
                break


def _attribute_sections(rows: list[dict[str, Any]]) -> None:
    """A header naming a worker (`-- Process 1 terminated with the following error:`, a pattern's
    `section_rank` group) gives its rank to the unprefixed lines after it, up to the next such header."""
    starts = sorted(
        (r["line"], int(json.loads(r["fields"])["section_rank"]))
        for r in rows
        if r["kind"] == "pattern" and r.get("fields") and '"section_rank"' in r["fields"]
    )
    if not starts:
        return
    for row in rows:
        if row["rank"] is not None or row["kind"] == "exit":
            continue
        owner = [rank for line, rank in starts if line <= row["line"]]
        if owner:
            row["rank"] = owner[-1]


_NON_SPACE = regex.compile(rb"\S")  # a search stops at the first byte; bytes.strip() would copy the file


_FIELDS_CENSUS = regex.compile(rb"(?m)^" + BRACKET_FIELDS_RANK.encode())


def _census(data: bytes) -> set[tuple[int | None, int | None, int | None]]:
    seen = set()
    whole = len(data) <= CENSUS_BYTES
    for part, cut in ((data[:CENSUS_BYTES], False), (data[-CENSUS_BYTES:], not whole)):
        # cheap checks first: a line-by-line regex over 128 KiB of every file is most of ingest's time
        if b"]:" in part:
            for task, role, local, rank in _CENSUS.findall(part):
                if role == b"rank":  # a bare [rankN]: is a global rank, not a torchrun role
                    local, rank = b"", local
                if task or local or rank:
                    seen.add((int(task) if task else None, int(local) if local else None, int(rank) if rank else None))
        if b"][" in part:  # a trainer's bracketed logging header naming its rank (prefixes._BRACKET_FIELDS_RANK)
            seen.update((None, None, int(rank)) for rank in _FIELDS_CENSUS.findall(part))
        # `srun --label` tasks with nothing below (one task per rank): every task that printed ran. Such a
        # file is labelled from its first lines on (the tail's first line may be cut, so its next one counts).
        start = part.find(b"\n") + 1 if cut else 0
        if _TASK_CENSUS.match(part, start) or _TASK_CENSUS.match(part, part.find(b"\n", start) + 1):
            seen.update((int(task), None, None) for task in _TASK_CENSUS.findall(part))
    return seen


def ingest_file(file: LogFile, display: str, scanner: Scanner, year: int, stdin: bytes | None = None) -> FileResult:
    read = read_log(file.path, stdin)
    if file.kind == "error_json":
        return _ingest_error_json(file, display, read.data, read.size, read.warnings, scanner)
    data = read.data
    rows: list[dict[str, Any]] = []
    parsed_until: dict[tuple[object, ...], int] = {}
    hits = scanner.scan(data)
    for hit in hits:
        if hit.prefix == EMPTY and hit.start:
            hit = _with_wrapped_head(hit, data, scanner)
        rows.extend(_pattern_rows(file, display, hit, year))
        if "traceback" in hit.pattern_ids:
            rows.extend(_traceback_rows(file, display, data, hit))
        summary = bool(_LAUNCHER_REPORTS & set(hit.pattern_ids))
        if summary and hit.line_no > parsed_until.get(hit.prefix.stream_key, 0):
            found = _exit_rows(file, display, data, hit, year)
            rows.extend(found)
            # a block's own ChildFailedError / Root Cause / rank lines must not start it again
            parsed_until[hit.prefix.stream_key] = max([r["end_line"] for r in found] + [hit.line_no + 1])
    rows.extend(_headless_tracebacks(file, display, data, hits, rows))
    rows.extend(_cut_tail_traceback(file, display, data, rows))
    _attribute_summary_rows(rows)
    _attribute_sections(rows)
    _attribute_single_process(rows)
    _attribute_own_header(rows, data)
    census = _census(data)
    if _NON_SPACE.search(data):  # a per-rank file that is not empty: its rank ran
        if file.local_rank is not None and file.run_dir is not None:
            census.add((None, file.local_rank, None))  # torchrun's --log-dir tree
        if file.rank is not None:
            census.add((None, None, file.rank))  # named after its rank, or mapped by a manifest
    return FileResult(rows, census, read.size, read.warnings)


def _ingest_error_json(
    file: LogFile, display: str, data: bytes, size: int, warnings: tuple[str, ...], scanner: Scanner
) -> FileResult:
    parsed = parse_error_json(data) if data else None
    if parsed is None:
        note = () if not data else (f"{display}: not a torchelastic error.json; skipped",)
        return FileResult([], set(), size, warnings + note)
    row = _base_row(file, display, 1, EMPTY)
    # The message may span lines (NCCL appends "Last error: ..."); its first line is the exception, and
    # the callstack's own last line carries the fully qualified type (torch.distributed.DistBackendError).
    lines = [line.strip() for line in parsed.exception.splitlines() if line.strip()]
    exception = lines[0] if lines else None
    code_file = code_line = None
    phase = ""
    if parsed.traceback:
        callstack = parsed.traceback.encode()
        tb = parse_traceback(callstack, 0, 1, split_prefix(parsed.traceback.split("\n", 1)[0])[0])
        phase = phase_of(tb.frames) or ""
        if tb.exception and exception and tb.exception.endswith(exception):
            exception = tb.exception
        if tb.user_frame is not None:
            code_file, code_line = tb.user_frame.path, tb.user_frame.line
    row.update(
        kind="error_json",
        ts=from_epoch(parsed.timestamp) if parsed.timestamp else None,
        text=exception,
        exception=exception,
        code_file=code_file,
        code_line=code_line,
        fields=json.dumps({"phase": phase}),
    )
    rows = [row]
    if exception:
        hit = scanner.match_line(exception)
        if hit is not None:
            for pattern_id, fields in hit.fields:
                rows.append({**row, "kind": "pattern", "pattern": pattern_id, "fields": json.dumps(fields)})
    return FileResult(rows, set(), size, warnings)


def _job_year(files: Iterable[LogFile]) -> int:
    """Glog lines omit the year: take the year the newest log was last written."""
    newest = 0.0
    for file in files:
        try:
            newest = max(newest, file.path.stat().st_mtime)
        except OSError:
            continue
    return datetime.fromtimestamp(newest).year if newest else datetime.now().year


def _display_names(files: Iterable[LogFile], roots: list[str]) -> dict[Path, str]:
    names = {}
    for file in files:
        shown = str(file.path)
        for root in roots:
            root_path = Path(root)
            if root_path.is_dir():
                try:
                    shown = file.path.relative_to(root_path).as_posix()
                    break
                except ValueError:
                    continue
        names[file.path] = shown
    return names


_INT64 = 2**63


def _in_range(value: Any) -> Any:
    """A number a hostile or corrupt line made too big for the frame (`[rank99999999999999999999]`) is unknown."""
    return None if isinstance(value, int) and not -_INT64 <= value < _INT64 else value


_INT_COLUMNS = frozenset(key for key, dtype in SCHEMA.items() if dtype == pl.Int64)


def _fits(key: str, value: Any) -> Any:
    """Every value of every row goes through here: the column's type is looked up once, not per value."""
    if value is None:
        return None
    if key in _INT_COLUMNS:
        return _in_range(value)
    return encodable(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class Ingested:
    events: pl.DataFrame
    census: set[tuple[int | None, int | None, int | None]]
    files: int
    bytes: int
    warnings: tuple[str, ...]


# srun's per-task output files (`--output=logs/%x-%j-%t.out`): one name with the task id last
_TASK_FILE = regex.compile(r"(?P<stem>.+?[-_.])(?P<task>\d{1,5})(?P<ext>\.\w+)?")


def _attribute_task_files(files: list[LogFile], results: list[FileResult]) -> None:
    """Sibling files numbered 0..N-1 (srun's `%t`), each of whose rank-prefixed lines names only its own number,
    are one rank's output each: their unprefixed lines (a logger's INFO line, a crash dump) are that rank's too.
    A job array's files (`%A_%a`) or a node's file under torchrun name other ranks and are left alone."""
    groups: dict[tuple[Path, str, str], dict[int, FileResult]] = {}
    for file, result in zip(files, results, strict=True):
        if (m := _TASK_FILE.fullmatch(file.path.name)) is not None and file.run_dir is None:
            groups.setdefault((file.path.parent, m["stem"], m["ext"] or ""), {})[int(m["task"])] = result
    for numbered in groups.values():
        if len(numbered) < 2 or set(numbered) != set(range(len(numbered))):
            continue
        named = {task: {r["rank"] for r in result.rows if r["rank"] is not None} for task, result in numbered.items()}
        if not any(named.values()) or any(ranks - {task} for task, ranks in named.items()):
            continue
        for task, result in numbered.items():
            for row in result.rows:
                own = row["kind"] != "exit" and not row["text"].lstrip().startswith(_JOB_LEVEL_WRITERS)
                if own and row["rank"] is None and row["file_rank"] is None:
                    row["file_rank"] = task


def ingest(
    files: list[LogFile], roots: list[str], scanner: Scanner, stdin: bytes | None = None, workers: int | None = None
) -> Ingested:
    names = _display_names(files, roots)
    year = _job_year(files)
    jobs = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(
            pool.map(
                lambda f: ingest_file(f, names[f.path], scanner, year, stdin if str(f.path) == "-" else None), files
            )
        )
    _attribute_task_files(files, results)
    rows = [row for result in results for row in result.rows]
    frame = pl.DataFrame([{key: _fits(key, row.get(key)) for key in SCHEMA} for row in rows], schema=SCHEMA)
    census = {tuple(_in_range(v) for v in entry) for r in results for entry in r.census}
    warnings = tuple(w for r in results for w in r.warnings)
    return Ingested(frame, census, len(files), sum(r.size for r in results), warnings)
